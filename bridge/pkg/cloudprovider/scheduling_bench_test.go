package cloudprovider

// Karpenter's scheduler over a realistic Elastic Metal catalog, in-process and
// through the bridge, and the latency of GetInstanceTypes.
//
//	just bench-catalog
//	(cd bridge && go test -run '^$' -bench 'Scheduling1000|GetInstanceTypes' -benchtime 20x -count 6 ./pkg/cloudprovider)
//
// The bridged side is the real thing: emsim serves the catalog of
// testdata/em-catalog.yaml (24 offers over the 6 EM zones), the real
// `karpenter-scaleway catalog --serve` reads it through the Scaleway client and
// serves it on a Unix socket, and this package's CloudProvider follows its
// WatchInstanceTypes stream. The in-process side is Karpenter's own fake
// CloudProvider holding the same catalog (converted once from the provider's
// unary answer, so the two share no objects). Each iteration does what the
// provisioner does per batch: GetInstanceTypes for the NodePool, build the
// topology and the scheduler, solve 1000 pending pods.
//
// The Rust binaries are taken from KPS_RUST_BIN_DIR (default ../target/debug);
// without them the benchmarks are skipped.

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

const (
	benchSecretKey = "6e0b2c4d-8f1a-4b3c-9d2e-7a5f1c3b9e8d"
	benchProjectID = "4d7a1a49-7bcb-4b3e-9c2e-1f0d5c1e2b3a"
	benchZones     = "fr-par-1,fr-par-2,nl-ams-1,nl-ams-2,pl-waw-2,pl-waw-3"
	benchPods      = 1000
)

// benchEnv is started once per test binary and shared by the benchmarks.
type benchEnv struct {
	bridged   *CloudProvider
	client    pb.CloudProviderClient
	inProcess *fake.CloudProvider
	nodePool  *v1.NodePool
	pods      []*corev1.Pod
	types     int
	offerings int
}

var (
	benchOnce sync.Once
	bench     *benchEnv
	benchErr  error
	benchSkip string
)

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startProcess runs a binary for the rest of the test binary's life, its
// output in dir/name.log.
func startProcess(dir, name, bin string, env []string, args ...string) error {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	benchProcs = append(benchProcs, cmd)
	return nil
}

var benchProcs []*exec.Cmd

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range benchProcs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	os.Exit(code)
}

func setupBench() {
	log.SetLogger(logging.NopLogger)
	binDir := os.Getenv("KPS_RUST_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join("..", "..", "..", "target", "debug")
	}
	emsim, provider := filepath.Join(binDir, "emsim"), filepath.Join(binDir, "karpenter-scaleway")
	for _, bin := range []string{emsim, provider} {
		if _, err := os.Stat(bin); err != nil {
			benchSkip = fmt.Sprintf("%s missing (cargo build -p emsim -p karpenter-scaleway --bins, or set KPS_RUST_BIN_DIR)", bin)
			return
		}
	}
	dir, err := os.MkdirTemp("", "kps-bench")
	if err != nil {
		benchErr = err
		return
	}
	catalogFile, err := filepath.Abs(filepath.Join("testdata", "em-catalog.yaml"))
	if err != nil {
		benchErr = err
		return
	}
	port, err := freePort()
	if err != nil {
		benchErr = err
		return
	}
	api := fmt.Sprintf("127.0.0.1:%d", port)
	if benchErr = startProcess(dir, "emsim", emsim, []string{"RUST_LOG=warn"},
		"--listen", api, "--catalog", catalogFile, "--secret-key", benchSecretKey, "--project-id", benchProjectID); benchErr != nil {
		return
	}
	socket := filepath.Join(dir, "provider.sock")
	if benchErr = startProcess(dir, "karpenter-scaleway", provider, []string{
		"RUST_LOG=warn", "SCW_SECRET_KEY=" + benchSecretKey, "SCW_DEFAULT_PROJECT_ID=" + benchProjectID,
		"SCW_API_URL=http://" + api, "SCW_ZONES=" + benchZones,
	}, "catalog", "--serve", socket); benchErr != nil {
		return
	}

	ctx := context.Background()
	conn, err := Dial(socket)
	if err != nil {
		benchErr = err
		return
	}
	client := pb.NewCloudProviderClient(conn)
	info, err := WaitForInfo(ctx, client, 5*time.Second, 60*time.Second)
	if err != nil {
		benchErr = fmt.Errorf("%w (logs in %s)", err, dir)
		return
	}
	opts := testOptions()
	opts.CallTimeout = 30 * time.Second
	bridged := New(client, opts, info, nil, nil)
	go bridged.WatchCatalog(ctx)
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := bridged.WaitForCatalog(waitCtx); err != nil {
		benchErr = fmt.Errorf("no catalog from the provider: %w (logs in %s)", err, dir)
		return
	}

	nodePool := test.NodePool(v1.NodePool{Spec: v1.NodePoolSpec{
		Template: v1.NodeClaimTemplate{Spec: v1.NodeClaimTemplateSpec{
			NodeClassRef: &v1.NodeClassReference{Group: "karpenter.scaleway.com", Kind: "ScalewayElasticMetalNodeClass", Name: "default"},
		}},
		Limits: v1.Limits{corev1.ResourceCPU: resource.MustParse("10000000"), corev1.ResourceMemory: resource.MustParse("10000000Gi")},
	}})
	// The in-process provider gets its own copy of the same catalog.
	resp, err := client.GetInstanceTypes(ctx, &pb.GetInstanceTypesRequest{NodePoolJson: []byte(`{}`)})
	if err != nil {
		benchErr = err
		return
	}
	its, err := convertInstanceTypes(resp.GetInstanceTypes())
	if err != nil {
		benchErr = err
		return
	}
	inProcess := fake.NewCloudProvider()
	inProcess.InstanceTypes = its
	offerings := 0
	for _, it := range its {
		offerings += len(it.Offerings)
	}
	bench = &benchEnv{
		bridged: bridged, client: client, inProcess: inProcess, nodePool: nodePool,
		pods: diversePods(benchPods), types: len(its), offerings: offerings,
	}
}

func benchSetup(b *testing.B) *benchEnv {
	b.Helper()
	benchOnce.Do(setupBench)
	if benchSkip != "" {
		b.Skip(benchSkip)
	}
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return bench
}

// solve is one provisioning round: what the provisioner does per batch.
func solve(ctx context.Context, cp cloudprovider.CloudProvider, nodePool *v1.NodePool, pods []*corev1.Pod) (scheduling.Results, error) {
	its, err := cp.GetInstanceTypes(ctx, nodePool)
	if err != nil {
		return scheduling.Results{}, err
	}
	byPool := map[string][]*cloudprovider.InstanceType{nodePool.Name: its}
	kube := fakecr.NewFakeClient()
	clk := &clock.RealClock{}
	cluster := state.NewCluster(clk, kube, cp)
	topology, err := scheduling.NewTopology(ctx, kube, cluster, nil, []*v1.NodePool{nodePool}, byPool, pods)
	if err != nil {
		return scheduling.Results{}, err
	}
	s := scheduling.NewScheduler(ctx, kube, []*v1.NodePool{nodePool}, cluster, nil, topology, byPool, nil,
		events.NewRecorder(&record.FakeRecorder{}), clk, nil, nil, scheduling.NumConcurrentReconciles(5))
	return s.Solve(ctx, pods)
}

func benchCtx() context.Context {
	return options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
}

// BenchmarkScheduling1000 runs the same round in-process and bridged; the
// nodes each run launches must be the same.
func BenchmarkScheduling1000(b *testing.B) {
	env := benchSetup(b)
	ctx := benchCtx()
	nodes := map[string]int{}
	for _, side := range []struct {
		name string
		cp   cloudprovider.CloudProvider
	}{{"in-process", env.inProcess}, {"bridged", env.bridged}} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportMetric(float64(env.types), "types")
			b.ReportMetric(float64(env.offerings), "offerings")
			for i := 0; i < b.N; i++ {
				res, err := solve(ctx, side.cp, env.nodePool, env.pods)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.PodErrors) > 0 {
					for p, err := range res.PodErrors {
						b.Fatalf("%d pods did not schedule, e.g. %s: %v", len(res.PodErrors), p.Name, err)
					}
				}
				nodes[side.name] = len(res.NewNodeClaims)
			}
			b.ReportMetric(float64(nodes[side.name]), "nodes")
		})
	}
	if nodes["in-process"] != nodes["bridged"] {
		b.Fatalf("in-process launched %d nodes, bridged %d: not the same catalog", nodes["in-process"], nodes["bridged"])
	}
}

// BenchmarkSchedulingInterleaved alternates the two sides round by round, so
// that a busy machine slows both alike, and reports each side's mean and the
// ratio bridged / in-process (the figure recorded in docs/figures.md).
func BenchmarkSchedulingInterleaved(b *testing.B) {
	env := benchSetup(b)
	ctx := benchCtx()
	var inProcess, bridged time.Duration
	for i := 0; i < b.N; i++ {
		for _, side := range []struct {
			cp    cloudprovider.CloudProvider
			total *time.Duration
		}{{env.inProcess, &inProcess}, {env.bridged, &bridged}} {
			start := time.Now()
			res, err := solve(ctx, side.cp, env.nodePool, env.pods)
			*side.total += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if len(res.PodErrors) > 0 {
				b.Fatalf("%d pods did not schedule", len(res.PodErrors))
			}
		}
	}
	b.ReportMetric(float64(inProcess.Milliseconds())/float64(b.N), "in-process-ms")
	b.ReportMetric(float64(bridged.Milliseconds())/float64(b.N), "bridged-ms")
	b.ReportMetric(float64(bridged)/float64(inProcess), "bridged/in-process")
}

// BenchmarkGetInstanceTypes: what core pays per call through the bridge (the
// streamed catalog in memory), and for comparison one unary call to the
// provider over the socket, decoded and converted (what the bridge did before
// the stream).
func BenchmarkGetInstanceTypes(b *testing.B) {
	env := benchSetup(b)
	ctx := context.Background()
	b.Run("bridge", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := env.bridged.GetInstanceTypes(ctx, env.nodePool); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unary-rpc", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			resp, err := env.client.GetInstanceTypes(ctx, &pb.GetInstanceTypesRequest{NodePoolJson: []byte(`{}`)})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := convertInstanceTypes(resp.GetInstanceTypes()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// diversePods: 1000 pending pods like a real batch (seeded): plain
// deployments of assorted sizes, zone-spread services, hostname
// anti-affinity, a few arm64 and GPU workloads.
func diversePods(n int) []*corev1.Pod {
	r := rand.New(rand.NewSource(42))
	cpus := []string{"100m", "250m", "500m", "1", "2", "4"}
	mems := []string{"128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi"}
	requests := func() corev1.ResourceList {
		return corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(cpus[r.Intn(len(cpus))]),
			corev1.ResourceMemory: resource.MustParse(mems[r.Intn(len(mems))]),
		}
	}
	var pods []*corev1.Pod
	for i := 0; i < n; i++ {
		opts := test.PodOptions{
			ObjectMeta:           metav1.ObjectMeta{UID: uuid.NewUUID(), Labels: map[string]string{}},
			ResourceRequirements: corev1.ResourceRequirements{Requests: requests()},
		}
		switch k := i % 20; {
		case k < 10: // plain
			opts.Labels["app"] = fmt.Sprintf("web-%d", r.Intn(20))
		case k < 15: // spread over zones
			app := fmt.Sprintf("svc-%d", r.Intn(5))
			opts.Labels["app"] = app
			opts.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			}}
		case k < 18: // one per host
			opts.Labels["app"] = "db"
			opts.PodAntiRequirements = []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				TopologyKey:   corev1.LabelHostname,
			}}
		case k == 18: // arm64
			opts.Labels["app"] = "arm"
			opts.NodeSelector = map[string]string{corev1.LabelArchStable: "arm64"}
		default: // GPU
			opts.Labels["app"] = "gpu"
			opts.ResourceRequirements.Requests["nvidia.com/gpu"] = resource.MustParse("1")
		}
		pods = append(pods, test.UnschedulablePod(opts))
	}
	return pods
}

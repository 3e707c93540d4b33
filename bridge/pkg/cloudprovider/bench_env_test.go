package cloudprovider

// The environments of the scheduling benchmarks (scheduling_bench_test.go):
// emsim serving a catalog, the real `karpenter-scaleway catalog --serve`
// reading it and serving it on a Unix socket, this package's CloudProvider
// following its WatchInstanceTypes stream (bridged), and Karpenter's fake
// CloudProvider holding the same catalogs (in-process, converted once from
// the provider's unary answers, so the two share no objects).
//
// Two environments, each started once per test binary when a benchmark
// first asks for it:
//   - em: testdata/em-catalog.yaml alone (what `just bench-catalog` has
//     always measured);
//   - combined: the same Elastic Metal catalog and testdata/instance-catalog.yaml
//     (the real Instance catalog of the nine zones), the provider serving both
//     kinds (`--kind all`).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/log"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/test"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

const (
	benchSecretKey = "6e0b2c4d-8f1a-4b3c-9d2e-7a5f1c3b9e8d"
	benchProjectID = "4d7a1a49-7bcb-4b3e-9c2e-1f0d5c1e2b3a"
	// benchZones are the Elastic Metal zones; Instances are sold in all nine.
	benchZones         = "fr-par-1,fr-par-2,nl-ams-1,nl-ams-2,pl-waw-2,pl-waw-3"
	benchInstanceZones = "fr-par-1,fr-par-2,fr-par-3,nl-ams-1,nl-ams-2,nl-ams-3,pl-waw-1,pl-waw-2,pl-waw-3"
	benchPods          = 1000

	benchInstanceKind = "ScalewayInstanceNodeClass"
)

// benchSpec describes one environment.
type benchSpec struct {
	name string
	// instanceCatalog adds emsim's --instance-catalog and the provider's
	// --kind all.
	instanceCatalog bool
}

var (
	emBench       = benchSpec{name: "em"}
	combinedBench = benchSpec{name: "combined", instanceCatalog: true}
)

// catalogSize is what one kind's catalog holds on the stream.
type catalogSize struct {
	types, offerings, zones int
}

func sizeOf(its []*cloudprovider.InstanceType) catalogSize {
	zones := map[string]struct{}{}
	offerings := 0
	for _, it := range its {
		offerings += len(it.Offerings)
		for _, o := range it.Offerings {
			zones[o.Zone()] = struct{}{}
		}
	}
	return catalogSize{types: len(its), offerings: offerings, zones: len(zones)}
}

func (s catalogSize) String() string {
	return fmt.Sprintf("%d types, %d offerings, %d zones", s.types, s.offerings, s.zones)
}

type benchEnv struct {
	bridged   *CloudProvider
	client    pb.CloudProviderClient
	inProcess *fake.CloudProvider
	// control is a second in-process side with its own copy of the
	// catalogs (another unary answer): in-process against it measures the
	// noise of the method on this machine at this moment.
	control *fake.CloudProvider
	// emPool's nodeClassRef is an Elastic Metal NodeClass; vmPool's (nil
	// without the Instance catalog) an Instance NodeClass.
	emPool, vmPool *v1.NodePool
	// sizes by NodeClass kind.
	sizes map[string]catalogSize
	pods  []*corev1.Pod
}

// typesIn is the number of types and offerings the NodePools see together.
func (e *benchEnv) typesIn(pools []*v1.NodePool) (types, offerings int) {
	for _, p := range pools {
		s := e.sizes[p.Spec.Template.Spec.NodeClassRef.Kind]
		types, offerings = types+s.types, offerings+s.offerings
	}
	return types, offerings
}

type lazyEnv struct {
	once sync.Once
	env  *benchEnv
	err  error
	skip string
}

var (
	benchEnvs  = map[string]*lazyEnv{emBench.name: {}, combinedBench.name: {}}
	benchProcs []*exec.Cmd
	procsMu    sync.Mutex
)

func TestMain(m *testing.M) {
	code := m.Run()
	procsMu.Lock()
	for _, p := range benchProcs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	procsMu.Unlock()
	os.Exit(code)
}

// benchSetup returns the environment of spec, starting it on first use.
func benchSetup(b *testing.B, spec benchSpec) *benchEnv {
	b.Helper()
	l := benchEnvs[spec.name]
	l.once.Do(func() { l.env, l.skip, l.err = startBench(spec) })
	if l.skip != "" {
		b.Skip(l.skip)
	}
	if l.err != nil {
		b.Fatal(l.err)
	}
	return l.env
}

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
	procsMu.Lock()
	benchProcs = append(benchProcs, cmd)
	procsMu.Unlock()
	return nil
}

func benchPool(kind string, weight int32) *v1.NodePool {
	pool := test.NodePool(v1.NodePool{Spec: v1.NodePoolSpec{
		Template: v1.NodeClaimTemplate{Spec: v1.NodeClaimTemplateSpec{
			NodeClassRef: &v1.NodeClassReference{Group: "karpenter.scaleway.com", Kind: kind, Name: "default"},
		}},
		Limits: v1.Limits{corev1.ResourceCPU: resource.MustParse("10000000"), corev1.ResourceMemory: resource.MustParse("10000000Gi")},
	}})
	if weight > 0 {
		pool.Spec.Weight = &weight
	}
	return pool
}

// unaryTypes is the provider's unary answer for a NodePool, converted.
func unaryTypes(ctx context.Context, client pb.CloudProviderClient, pool *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	raw, err := json.Marshal(pool)
	if err != nil {
		return nil, err
	}
	resp, err := client.GetInstanceTypes(ctx, &pb.GetInstanceTypesRequest{NodePoolJson: raw})
	if err != nil {
		return nil, err
	}
	return convertInstanceTypes(resp.GetInstanceTypes())
}

// pollUntil polls cond every 200 ms until it holds or timeout passes.
func pollUntil(timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func startBench(spec benchSpec) (env *benchEnv, skip string, err error) {
	log.SetLogger(logging.NopLogger)
	binDir := os.Getenv("KPS_RUST_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join("..", "..", "..", "target", "debug")
	}
	emsim, provider := filepath.Join(binDir, "emsim"), filepath.Join(binDir, "karpenter-scaleway")
	for _, bin := range []string{emsim, provider} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Sprintf("%s missing (cargo build -p emsim -p karpenter-scaleway --bins, or set KPS_RUST_BIN_DIR)", bin), nil
		}
	}
	dir, err := os.MkdirTemp("", "kps-bench-"+spec.name)
	if err != nil {
		return nil, "", err
	}
	emCatalog, err := filepath.Abs(filepath.Join("testdata", "em-catalog.yaml"))
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	api := fmt.Sprintf("127.0.0.1:%d", port)
	emsimArgs := []string{"--listen", api, "--catalog", emCatalog, "--secret-key", benchSecretKey, "--project-id", benchProjectID}
	providerArgs := []string{"catalog", "--serve", filepath.Join(dir, "provider.sock")}
	if spec.instanceCatalog {
		vmCatalog, err := filepath.Abs(filepath.Join("testdata", "instance-catalog.yaml"))
		if err != nil {
			return nil, "", err
		}
		emsimArgs = append(emsimArgs, "--instance-catalog", vmCatalog)
		providerArgs = append(providerArgs, "--kind", "all", "--instance-zones", benchInstanceZones)
	}
	if err := startProcess(dir, "emsim", emsim, []string{"RUST_LOG=warn"}, emsimArgs...); err != nil {
		return nil, "", err
	}
	if err := startProcess(dir, "karpenter-scaleway", provider, []string{
		"RUST_LOG=warn", "SCW_SECRET_KEY=" + benchSecretKey, "SCW_DEFAULT_PROJECT_ID=" + benchProjectID,
		"SCW_API_URL=http://" + api, "SCW_ZONES=" + benchZones,
	}, providerArgs...); err != nil {
		return nil, "", err
	}

	ctx := context.Background()
	conn, err := Dial(filepath.Join(dir, "provider.sock"))
	if err != nil {
		return nil, "", err
	}
	client := pb.NewCloudProviderClient(conn)
	info, err := WaitForInfo(ctx, client, 5*time.Second, 60*time.Second)
	if err != nil {
		return nil, "", fmt.Errorf("%w (logs in %s)", err, dir)
	}
	opts := testOptions()
	opts.CallTimeout = 30 * time.Second
	opts.CreateTimeout = 30 * time.Second
	bridged := New(client, opts, info, nil, nil)
	go bridged.WatchCatalog(ctx)
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := bridged.WaitForCatalog(waitCtx); err != nil {
		return nil, "", fmt.Errorf("no catalog from the provider: %w (logs in %s)", err, dir)
	}

	env = &benchEnv{
		bridged: bridged, client: client, inProcess: fake.NewCloudProvider(), control: fake.NewCloudProvider(),
		emPool: benchPool(kindElasticMetal, 0), sizes: map[string]catalogSize{}, pods: diversePods(benchPods),
	}
	pools := []*v1.NodePool{env.emPool}
	if spec.instanceCatalog {
		// Weights as in examples/: Elastic Metal first when both are used.
		env.emPool.Spec.Weight = ptr(int32(50))
		env.vmPool = benchPool(benchInstanceKind, 10)
		pools = append(pools, env.vmPool)
	}
	for _, pool := range pools {
		// The first snapshot may hold Elastic Metal alone: the Instance
		// refresher reads nine zones, page by page, paced. Then the bridge
		// must serve what the provider answers.
		var its []*cloudprovider.InstanceType
		if err := pollUntil(60*time.Second, "the provider's catalog of "+pool.Spec.Template.Spec.NodeClassRef.Kind, func() (bool, error) {
			var err error
			its, err = unaryTypes(ctx, client, pool)
			return len(its) > 0, err
		}); err != nil {
			return nil, "", fmt.Errorf("%w (logs in %s)", err, dir)
		}
		if err := pollUntil(10*time.Second, "the bridge's catalog of "+pool.Spec.Template.Spec.NodeClassRef.Kind, func() (bool, error) {
			got, err := bridged.GetInstanceTypes(ctx, pool)
			return err == nil && sameCatalog(got, its) == nil, nil
		}); err != nil {
			got, _ := bridged.GetInstanceTypes(ctx, pool)
			return nil, "", fmt.Errorf("%w: %v (logs in %s)", err, sameCatalog(got, its), dir)
		}
		env.inProcess.InstanceTypesForNodePool[pool.Name] = its
		copied, err := unaryTypes(ctx, client, pool)
		if err == nil {
			err = sameCatalog(copied, its)
		}
		if err != nil {
			return nil, "", fmt.Errorf("the control's copy of the catalog: %w", err)
		}
		env.control.InstanceTypesForNodePool[pool.Name] = copied
		env.sizes[pool.Spec.Template.Spec.NodeClassRef.Kind] = sizeOf(its)
	}
	if !spec.instanceCatalog {
		// As before there were two kinds: the fake answers any NodePool.
		env.inProcess.InstanceTypes = env.inProcess.InstanceTypesForNodePool[env.emPool.Name]
		env.control.InstanceTypes = env.control.InstanceTypesForNodePool[env.emPool.Name]
	}
	return env, "", nil
}

func ptr[T any](v T) *T { return &v }

// sameCatalog tells how two catalogs differ in what the scheduler reads:
// names, requirements, capacity, overhead, and each offering's
// requirements, price and availability.
func sameCatalog(a, b []*cloudprovider.InstanceType) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d types vs %d", len(a), len(b))
	}
	byName := make(map[string]*cloudprovider.InstanceType, len(b))
	for _, it := range b {
		byName[it.Name] = it
	}
	for _, x := range a {
		y, ok := byName[x.Name]
		switch {
		case !ok:
			return fmt.Errorf("%s only on one side", x.Name)
		case x.Requirements.String() != y.Requirements.String():
			return fmt.Errorf("%s: requirements differ", x.Name)
		case !equality.Semantic.DeepEqual(x.Capacity, y.Capacity) || !equality.Semantic.DeepEqual(x.Overhead, y.Overhead):
			return fmt.Errorf("%s: capacity or overhead differ", x.Name)
		case len(x.Offerings) != len(y.Offerings):
			return fmt.Errorf("%s: %d offerings vs %d", x.Name, len(x.Offerings), len(y.Offerings))
		}
		for i, o := range x.Offerings {
			p := y.Offerings[i]
			if o.Requirements.String() != p.Requirements.String() || o.Price != p.Price || o.Available != p.Available {
				return fmt.Errorf("%s: offering %d differs", x.Name, i)
			}
		}
	}
	return nil
}

package cloudprovider

// Karpenter's scheduler over a realistic catalog, in-process and through the
// bridge, and the latency of GetInstanceTypes.
//
//	just bench-catalog            # Elastic Metal: BenchmarkScheduling*, BenchmarkGetInstanceTypes
//	just bench-catalog-combined   # both kinds: BenchmarkCombined*
//	(cd bridge && go test -run '^$' -bench '^BenchmarkScheduling' -benchtime 20x -count 6 ./pkg/cloudprovider)
//
// The environments (bench_env_test.go) are the real thing: emsim serves the
// catalogs of testdata/ (em-catalog.yaml: 24 offers over the 6 EM zones;
// instance-catalog.yaml: the 147 Instance types of the 9 Instance zones as
// recorded from the real API), the real `karpenter-scaleway catalog --serve`
// reads them through the Scaleway client and serves them on a Unix socket,
// and this package's CloudProvider follows its WatchInstanceTypes stream. The
// in-process side is Karpenter's own fake CloudProvider holding the same
// catalogs. Each iteration does what the provisioner does per batch:
// GetInstanceTypes for each NodePool, build the topology and the scheduler,
// solve 1000 pending pods.
//
// The Rust binaries are taken from KPS_RUST_BIN_DIR (default ../target/debug);
// without them the benchmarks are skipped.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// solve is one provisioning round: what the provisioner does per batch. opts
// add to the scheduler's options (the provisioner itself passes
// scheduling.DisableReservedCapacityFallback).
func solve(ctx context.Context, cp cloudprovider.CloudProvider, pools []*v1.NodePool, pods []*corev1.Pod, opts ...scheduling.Options) (scheduling.Results, error) {
	byPool := map[string][]*cloudprovider.InstanceType{}
	for _, pool := range pools {
		its, err := cp.GetInstanceTypes(ctx, pool)
		if err != nil {
			return scheduling.Results{}, err
		}
		byPool[pool.Name] = its
	}
	kube := fakecr.NewFakeClient()
	clk := &clock.RealClock{}
	cluster := state.NewCluster(clk, kube, cp)
	topology, err := scheduling.NewTopology(ctx, kube, cluster, nil, pools, byPool, pods)
	if err != nil {
		return scheduling.Results{}, err
	}
	s := scheduling.NewScheduler(ctx, kube, pools, cluster, nil, topology, byPool, nil,
		events.NewRecorder(&record.FakeRecorder{}), clk, nil, nil, append([]scheduling.Options{scheduling.NumConcurrentReconciles(5)}, opts...)...)
	return s.Solve(ctx, pods)
}

func benchCtx() context.Context {
	return options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
}

// BenchmarkScheduling1000 runs the same round in-process and bridged over the
// Elastic Metal catalog; the nodes each run launches must be the same.
func BenchmarkScheduling1000(b *testing.B) {
	env := benchSetup(b, emBench)
	ctx := benchCtx()
	pools := []*v1.NodePool{env.emPool}
	types, offerings := env.typesIn(pools)
	nodes := map[string]int{}
	for _, side := range []struct {
		name string
		cp   cloudprovider.CloudProvider
	}{{"in-process", env.inProcess}, {"bridged", env.bridged}} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportMetric(float64(types), "types")
			b.ReportMetric(float64(offerings), "offerings")
			for i := 0; i < b.N; i++ {
				res, err := solve(ctx, side.cp, pools, env.pods)
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

// BenchmarkSchedulingInterleaved alternates the two sides round by round
// over the Elastic Metal catalog, so that a busy machine slows both alike,
// and reports each side's mean and the ratio bridged / in-process (the figure
// recorded in docs/figures.md).
func BenchmarkSchedulingInterleaved(b *testing.B) {
	env := benchSetup(b, emBench)
	interleaved(b, env, []*v1.NodePool{env.emPool}, env.sides())
}

// BenchmarkCombinedSchedulingInterleaved does the same with both kinds served
// (`catalog --serve --kind all`): instance-pool is one NodePool of the
// Instance kind (the bridge picks the catalog by nodeClassRef kind);
// em+instance-pools adds an Elastic Metal NodePool of higher weight, as in
// examples/, so that one round schedules over both catalogs;
// instance-pool-control runs instance-pool's rounds with the in-process side
// on both ends, for the noise floor.
func BenchmarkCombinedSchedulingInterleaved(b *testing.B) {
	env := benchSetup(b, combinedBench)
	b.Logf("catalog on the stream: Elastic Metal %s; Instance %s",
		env.sizes[kindElasticMetal], env.sizes[benchInstanceKind])
	b.Run("instance-pool", func(b *testing.B) {
		interleaved(b, env, []*v1.NodePool{env.vmPool}, env.sides())
	})
	b.Run("em+instance-pools", func(b *testing.B) {
		interleaved(b, env, []*v1.NodePool{env.emPool, env.vmPool}, env.sides())
	})
	b.Run("instance-pool-control", func(b *testing.B) {
		interleaved(b, env, []*v1.NodePool{env.vmPool}, env.controlSides())
	})
}

// side is one CloudProvider of an interleaved benchmark and its metric name.
type side struct {
	name string
	cp   cloudprovider.CloudProvider
}

func (e *benchEnv) sides() [2]side {
	return [2]side{{"in-process", e.inProcess}, {"bridged", e.bridged}}
}

// controlSides pits the in-process side against a copy of itself: what the
// method reads when nothing differs.
func (e *benchEnv) controlSides() [2]side {
	return [2]side{{"in-process", e.inProcess}, {"in-process-copy", e.control}}
}

// interleaved runs b.N rounds of each side, alternating, and reports the wall
// time and the process's CPU time of each side (the second is the steadier on
// a shared machine: a round's wall time grows with whatever else runs).
// Karpenter's scheduler is not quite deterministic (one round in a few
// launches a node more, either side), so the sides' node counts are reported,
// not compared round by round; bench_env_test.go checked that they hold the
// same catalog.
func interleaved(b *testing.B, env *benchEnv, pools []*v1.NodePool, sides [2]side) {
	ctx := benchCtx()
	var took, cpu [2]time.Duration
	var nodes [2]int
	ratios := make([]float64, 0, b.N)
	for i := 0; i < b.N; i++ {
		var round [2]time.Duration
		// Each side goes first every other round: the one that follows pays
		// for the garbage of the one before.
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, j := range order {
			start, startCPU := time.Now(), processCPU(b)
			res, err := solve(ctx, sides[j].cp, pools, env.pods)
			round[j] = time.Since(start)
			cpu[j] += processCPU(b) - startCPU
			if err != nil {
				b.Fatal(err)
			}
			if len(res.PodErrors) > 0 {
				for p, err := range res.PodErrors {
					b.Fatalf("%d pods did not schedule, e.g. %s: %v", len(res.PodErrors), p.Name, err)
				}
			}
			took[j] += round[j]
			nodes[j] += len(res.NewNodeClaims)
		}
		ratios = append(ratios, float64(round[1])/float64(round[0]))
	}
	types, offerings := env.typesIn(pools)
	slices.Sort(ratios)
	b.ReportMetric(float64(types), "types")
	b.ReportMetric(float64(offerings), "offerings")
	first, second := sides[0].name, sides[1].name
	b.ReportMetric(float64(nodes[0])/float64(b.N), "nodes-"+first)
	b.ReportMetric(float64(nodes[1])/float64(b.N), "nodes-"+second)
	b.ReportMetric(float64(took[0].Milliseconds())/float64(b.N), first+"-ms")
	b.ReportMetric(float64(took[1].Milliseconds())/float64(b.N), second+"-ms")
	b.ReportMetric(float64(took[1])/float64(took[0]), second+"/"+first)
	b.ReportMetric(ratios[len(ratios)/2], "median-round-ratio")
	b.ReportMetric(float64(cpu[0].Milliseconds())/float64(b.N), first+"-cpu-ms")
	b.ReportMetric(float64(cpu[1].Milliseconds())/float64(b.N), second+"-cpu-ms")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-"+second+"/"+first)
}

// processCPU is the CPU time this process has used (user and system): unlike
// the wall time, it does not grow while other processes hold the cores.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGetInstanceTypes: what core pays per call through the bridge (the
// streamed catalog in memory), and for comparison one unary call to the
// provider over the socket, decoded and converted (what the bridge did before
// the stream).
func BenchmarkGetInstanceTypes(b *testing.B) {
	env := benchSetup(b, emBench)
	getInstanceTypes(b, env, env.emPool, []byte(`{}`))
}

// BenchmarkCombinedGetInstanceTypes: the same per kind with both kinds served.
func BenchmarkCombinedGetInstanceTypes(b *testing.B) {
	env := benchSetup(b, combinedBench)
	for _, pool := range []*v1.NodePool{env.vmPool, env.emPool} {
		raw, err := json.Marshal(pool)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(pool.Spec.Template.Spec.NodeClassRef.Kind, func(b *testing.B) { getInstanceTypes(b, env, pool, raw) })
	}
}

// getInstanceTypes measures the bridge's answer for pool and the provider's
// unary answer to poolJSON.
func getInstanceTypes(b *testing.B, env *benchEnv, pool *v1.NodePool, poolJSON []byte) {
	ctx := context.Background()
	b.Run("bridge", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := env.bridged.GetInstanceTypes(ctx, pool); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unary-rpc", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			resp, err := env.client.GetInstanceTypes(ctx, &pb.GetInstanceTypesRequest{NodePoolJson: poolJSON})
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

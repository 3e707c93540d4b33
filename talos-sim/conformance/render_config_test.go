package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/karpenter-provider-scaleway/talos-sim/conformance/talosconfig"
)

// The Talos minors whose `talosctl gen config` worker files the provider
// must turn into configs Talos accepts.
var talosMinors = []string{"v1.11", "v1.12", "v1.13", "v1.14"}

// newestMinor is the minor of the machinery this module links (go.mod): its
// configs are validated in process. A config for an older minor is validated
// by that minor's machinery, which may refuse what newer machinery accepts
// (a document kind it does not know): validators/main.go built per minor
// with that minor's module file (validators/talos-<minor>.mod), since Go
// links one version of a module per binary.
const newestMinor = "v1.14"

const machineryModule = "github.com/siderolabs/talos/pkg/machinery"

var (
	validatorsMu sync.Mutex
	validators   = map[string]func() (string, error){}
)

// validatorBin returns talos-validate-<minor>, built by validators/build.sh
// (cached in .cache/bin while its inputs are unchanged; once per test run).
func validatorBin(t *testing.T, minor string) string {
	t.Helper()

	validatorsMu.Lock()
	build, ok := validators[minor]
	if !ok {
		build = sync.OnceValues(func() (string, error) {
			cmd := exec.Command(filepath.Join("validators", "build.sh"), minor)

			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr

			if err := cmd.Run(); err != nil {
				return "", fmt.Errorf("validators/build.sh %s: %w: %s", minor, err, stderr.String())
			}

			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")

			return lines[len(lines)-1], nil
		})
		validators[minor] = build
	}
	validatorsMu.Unlock()

	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}

	return bin
}

// machineryVersion is the version of Talos' machinery that validates the
// configs of a minor.
func machineryVersion(t *testing.T, minor string) string {
	t.Helper()

	if minor == newestMinor {
		// A test binary carries no module list: ask the go.mod it is built from.
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", machineryModule).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", machineryModule, err)
		}

		return strings.TrimSpace(string(out))
	}

	out, err := exec.Command(validatorBin(t, minor), "-version").Output()
	if err != nil {
		t.Fatalf("talos-validate-%s -version: %v", minor, err)
	}

	module, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if module != machineryModule {
		t.Fatalf("talos-validate-%s -version: %q", minor, out)
	}

	return version
}

// validateAs validates a config as a node of the given Talos minor does:
// loaded and validated in metal mode, strict, by that minor's machinery. The
// error is a *talosconfig.ParseError (the config does not load) or a
// *talosconfig.InvalidError, with Talos' message.
func validateAs(t *testing.T, minor string, config []byte) ([]string, error) {
	t.Helper()

	if minor == newestMinor {
		return talosconfig.Validate(config)
	}

	cmd := exec.Command(validatorBin(t, minor))
	cmd.Stdin = bytes.NewReader(config)

	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	err := cmd.Run()

	var exit *exec.ExitError

	switch {
	case err == nil:
		var warnings []string

		for line := range strings.SplitSeq(stdout.String(), "\n") {
			if line != "" {
				warnings = append(warnings, line)
			}
		}

		return warnings, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return nil, &talosconfig.InvalidError{Err: errors.New(stderr.String())}
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		return nil, &talosconfig.ParseError{Err: errors.New(stderr.String())}
	default:
		t.Fatalf("talos-validate-%s: %v: %s", minor, err, stderr.String())

		return nil, nil
	}
}

func TestEachMinorIsValidatedByItsOwnMachinery(t *testing.T) {
	for _, minor := range talosMinors {
		if v := machineryVersion(t, minor); !strings.HasPrefix(v, minor+".") {
			t.Errorf("the configs of Talos %s are validated by machinery %s", minor, v)
		}
	}
}

const claimYAML = `apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7k2p
  labels:
    karpenter.sh/nodepool: default
    team: ml
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [EM-I215E-NVME]}
    - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  taints:
    - {key: dedicated, value: ml, effect: NoSchedule}
  startupTaints:
    - {key: cilium.io/agent-not-ready, effect: NoExecute}
  nodeClassRef: {group: karpenter.scaleway.com, kind: ScalewayElasticMetalNodeClass, name: default}
`

// nodeClass is a NodeClass with the given machineConfigPatches (each a YAML
// block scalar).
func nodeClass(version string, patches ...string) string {
	var b strings.Builder

	fmt.Fprintf(&b, `apiVersion: karpenter.scaleway.com/v1alpha1
kind: ScalewayElasticMetalNodeClass
metadata:
  name: default
spec:
  zones: [fr-par-2]
  billing: hourly
  image:
    urlTemplate: "https://factory.talos.dev/image/{schematic}/{version}/metal-{arch}.raw.xz"
    version: %s.0
    schematic: abc
  rescueSshKey:
    iamKeyId: key-1
    privateKeySecretRef: {name: rescue, namespace: karpenter, key: id_ed25519}
  machineConfigSecretRef: {name: talos, namespace: karpenter, key: worker.yaml}
  machineConfigPatches:
`, version)

	if len(patches) == 0 {
		b.WriteString("    []\n")
	}

	for _, p := range patches {
		b.WriteString("    - |\n")

		for line := range strings.SplitSeq(strings.TrimRight(p, "\n"), "\n") {
			b.WriteString("      " + line + "\n")
		}
	}

	return b.String()
}

// primaryMAC is the MAC address of the primary NIC passed to render-config
// for an Elastic Metal node.
const primaryMAC = "a0:36:9f:00:00:02"

// renderConfig runs `karpenter-scaleway render-config` on files only (no
// cluster), with the extra flags given.
func renderConfig(t *testing.T, dir, base, class string, flags ...string) []byte {
	t.Helper()

	out, stderr, err := runRenderConfig(t, dir, base, class, flags...)
	if err != nil {
		t.Fatalf("render-config: %v: %s", err, stderr)
	}

	return out
}

// runRenderConfig is renderConfig that returns render-config's failure.
func runRenderConfig(t *testing.T, dir, base, class string, flags ...string) ([]byte, string, error) {
	t.Helper()

	bin := binary(t, "KPS_PROVIDER_BIN", "karpenter-scaleway")
	files := map[string]string{"base.yaml": base, "nodeclass.yaml": class, "claim.yaml": claimYAML}

	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	args := append([]string{"render-config",
		"--nodeclass-file", filepath.Join(dir, "nodeclass.yaml"),
		"--base-config-file", filepath.Join(dir, "base.yaml"),
		"--nodeclaim-file", filepath.Join(dir, "claim.yaml"),
		"--show-secrets"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent") // never reads a cluster

	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	err := cmd.Run()

	return stdout.Bytes(), stderr.String(), err
}

// workerConfig is the worker config `talosctl gen config` of a minor writes,
// generated by machinery (fresh secrets).
func workerConfig(t *testing.T, minor string) string {
	t.Helper()

	base, err := talosconfig.Worker(talosconfig.WorkerOptions{
		ClusterName:       "demo",
		Endpoint:          "https://10.0.0.1:6443",
		TalosVersion:      minor,
		KubernetesVersion: "1.35.0",
		InstallDisk:       "/dev/sda", // `talosctl gen config`'s default
	})
	if err != nil {
		t.Fatal(err)
	}

	return string(base)
}

// examplePatches are NodeClass patches a user would write for a base of the
// minor: a sysctl, a kubelet argument and a kernel module. Talos 1.14 keeps
// the kubelet in a KubeletConfig document and refuses .machine.kubelet next
// to it, so its kubelet patch is a document too.
func examplePatches(minor string) []string {
	kubelet := "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"true\"\n"
	if minor >= "v1.14" {
		kubelet = "apiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  rotate-server-certificates: \"true\"\n"
	}

	return []string{
		"machine:\n  sysctls:\n    vm.max_map_count: \"524288\"\n",
		kubelet,
		"machine:\n  kernel:\n    modules:\n      - name: nvidia\n",
	}
}

// TestRenderedConfigsPassTalosValidation renders a node's config from the
// worker file of each supported Talos minor, as generated by machinery, and
// validates it with that minor's machinery in metal mode, strict: what a node
// of that minor does with ApplyConfiguration, warnings counted as errors. The
// newer minors' machinery validates it too: a cluster upgraded from that minor
// may keep its worker file.
func TestRenderedConfigsPassTalosValidation(t *testing.T) {
	for i, minor := range talosMinors {
		patches := map[string][]string{
			"no patches":      nil,
			"example patches": examplePatches(minor),
		}
		for name, p := range patches {
			t.Run(minor+"/"+name, func(t *testing.T) {
				base := workerConfig(t, minor)

				out := renderConfig(t, t.TempDir(), base, nodeClass(minor, p...), "--mac", primaryMAC)
				for _, node := range talosMinors[i:] {
					if _, err := validateAs(t, node, out); err != nil {
						t.Errorf("Talos %s (machinery %s) refuses the config rendered from a %s base: %v", node, machineryVersion(t, node), minor, err)
					}
				}

				// The node's own settings are there, in the form its minor knows.
				// (Talos 1.14 selects the install disk by CEL: `disk.dev_path == "/dev/nvme0n1"`.)
				for _, want := range []string{"hostname: default-x7k2p", "provider-id: scaleway://baremetal/fr-par-2/", "/dev/nvme0n1"} {
					if !bytes.Contains(out, []byte(want)) {
						t.Errorf("rendered config lacks %q", want)
					}
				}

				if minor == "v1.11" && bytes.Contains(out, []byte("kind: ")) {
					t.Errorf("a v1.11 node knows no typed network documents, got:\n%s", kinds(out))
				}
			})
		}
	}
}

// TestOlderMinorsRefuseNewerDocuments is the reason for validating with each
// minor's machinery: a config that newest machinery accepts but a node of an
// older minor refuses, because it holds a document kind that minor does not
// know, fails validateAs for that minor.
func TestOlderMinorsRefuseNewerDocuments(t *testing.T) {
	worker := func(minor string) string {
		base, err := talosconfig.Worker(talosconfig.WorkerOptions{
			ClusterName:  "demo",
			Endpoint:     "https://10.0.0.1:6443",
			TalosVersion: minor,
			InstallDisk:  "/dev/sda",
		})
		if err != nil {
			t.Fatal(err)
		}

		return string(base)
	}

	v111 := worker("v1.11")
	v111Static := regexp.MustCompile(`(?m)^ +stableHostname: true\n`).ReplaceAllString(v111, "")

	if v111Static == v111 {
		t.Fatal("the v1.11 worker config has no machine.features.stableHostname")
	}

	for _, c := range []struct {
		name   string
		config string
		minor  string
		want   string
	}{
		{
			// What the renderer would write if it took a v1.11 base for a
			// newer one: the v1alpha1 document with the stable hostname
			// dropped, plus HostnameConfig and LinkAliasConfig documents.
			name: "v1.11 base with the documents of a newer one",
			config: v111Static +
				"---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: default-x7k2p\n" +
				"---\napiVersion: v1alpha1\nkind: LinkAliasConfig\nname: net0\nselector:\n    match: mac(link.permanent_addr) == \"a0:36:9f:00:00:02\"\n",
			minor: "v1.11",
			want:  `"HostnameConfig" "v1alpha1": not registered`,
		},
		{
			// A document kind Talos 1.13 added.
			name:   "v1.12 base with a KubeSpanConfig document",
			config: worker("v1.12") + "---\napiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: true\n",
			minor:  "v1.12",
			want:   `"KubeSpanConfig" "v1alpha1": not registered`,
		},
		{
			// A document kind Talos 1.14 added.
			name:   "v1.13 base with a SysctlConfig document",
			config: worker("v1.13") + "---\napiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n    vm.max_map_count: \"524288\"\n",
			minor:  "v1.13",
			want:   `"SysctlConfig" "v1alpha1": not registered`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := validateAs(t, newestMinor, []byte(c.config)); err != nil {
				t.Fatalf("Talos %s should accept the config: %v", newestMinor, err)
			}

			_, err := validateAs(t, c.minor, []byte(c.config))
			if err == nil {
				t.Fatalf("Talos %s (machinery %s) accepts a config with a document kind it does not know", c.minor, machineryVersion(t, c.minor))
			}

			if !talosconfig.IsParseError(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Talos %s: want a load error with %q, got %v", c.minor, c.want, err)
			}
		})
	}

	// Without the newer documents, the older minors accept their own base.
	for _, minor := range []string{"v1.11", "v1.12", "v1.13"} {
		if _, err := validateAs(t, minor, []byte(worker(minor))); err != nil {
			t.Errorf("Talos %s refuses its own worker config: %v", minor, err)
		}
	}
}

// kinds lists the `kind:` lines of a config (no secrets in them).
func kinds(config []byte) string {
	var out []string

	for line := range strings.SplitSeq(string(config), "\n") {
		if strings.HasPrefix(line, "kind: ") {
			out = append(out, line)
		}
	}

	return strings.Join(out, "\n")
}

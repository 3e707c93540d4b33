package talosconfig

import (
	"strings"
	"testing"
)

func worker(t *testing.T, minor string) []byte {
	t.Helper()

	cfg, err := Worker(WorkerOptions{
		ClusterName:  "demo",
		Endpoint:     "https://10.0.0.1:6443",
		TalosVersion: minor,
		InstallDisk:  "/dev/sda",
	})
	if err != nil {
		t.Fatal(err)
	}

	return cfg
}

func TestGeneratedWorkersValidateAndHaveTheirMinorsShape(t *testing.T) {
	for minor, shape := range map[string]string{
		"v1.11": "stableHostname: true",
		"v1.12": "kind: HostnameConfig",
		"v1.13": "kind: HostnameConfig",
	} {
		cfg := worker(t, minor)
		if _, err := Validate(cfg); err != nil {
			t.Errorf("%s: generated worker config does not validate: %v", minor, err)
		}

		if !strings.Contains(string(cfg), shape) {
			t.Errorf("%s: want %q in the generated config", minor, shape)
		}
	}
}

func TestValidateRefusesWhatTalosRefuses(t *testing.T) {
	// The defect this package exists for: a HostnameConfig document on top
	// of a v1alpha1 config that already asks for a stable hostname.
	conflict := string(worker(t, "v1.11")) + "---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: node-1\n"

	_, err := Validate([]byte(conflict))
	if err == nil || IsParseError(err) || !strings.Contains(err.Error(), "stable hostname is already set in v1alpha1 config") {
		t.Fatalf("want the stable hostname conflict, got %v", err)
	}

	noDisk := strings.Replace(string(worker(t, "v1.13")), "        disk: /dev/sda\n", "", 1)

	_, err = Validate([]byte(noDisk))
	if err == nil || !strings.Contains(err.Error(), "either install disk or diskSelector should be defined") {
		t.Fatalf("want the metal mode's install disk check, got %v", err)
	}

	for name, text := range map[string]string{
		"not YAML":     "machine: [unclosed\n",
		"unknown kind": "apiVersion: v1alpha1\nkind: NoSuchConfig\n",
		"unknown key":  strings.Replace(string(worker(t, "v1.13")), "persist: true", "persist: true\nbogus: 1", 1),
	} {
		if _, err := Validate([]byte(text)); !IsParseError(err) {
			t.Errorf("%s: want a parse error, got %v", name, err)
		}
	}
}

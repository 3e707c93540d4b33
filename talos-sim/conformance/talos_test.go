// Package conformance drives talos-sim with independent clients: OpenSSH's
// `ssh` for the rescue system and Talos' own Go client library
// (pkg/machinery/client, as `talosctl --insecure` uses it) for the
// maintenance API. A server goes the provider's way: ordered in emsim,
// rescue-booted, imaged with `curl | xz -d | dd`, booted normally, then
// configured.
//
// EMSIM_BIN and TALOS_SIM_BIN name the binaries (default:
// ../../target/debug/{emsim,talos-sim}).
package conformance

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	secretKey = "11111111-1111-4111-8111-111111111111"
	zoneURL   = "/baremetal/v1/zones/fr-par-2"
	// Addresses of this test's servers: apart from the e2e stacks' ranges.
	ipRange   = "127.94.6.0/24"
	serverIP  = "127.94.6.10"
	sshPort   = "2222"
	talosPort = "50000"
	version   = "v1.13.9"
)

func binary(t *testing.T, env, name string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		bin = filepath.Join("..", "..", "target", "debug", name)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s binary %s: %v (build it with `cargo build -p %s --bins` or set %s)", name, bin, err, name, env)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs a process for the test's lifetime and shows its output if the test fails.
func start(t *testing.T, bin string, args ...string) {
	t.Helper()
	var logs bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), logs.String())
		}
	})
}

func eventually(t *testing.T, what string, timeout time.Duration, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, last := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// call is one emsim API call with JSON in and out.
func call(t *testing.T, base, method, path string, body any) map[string]any {
	t.Helper()
	var in io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		in = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, in)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", secretKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return out
}

func waitReady(t *testing.T, base, id, bootType string) {
	t.Helper()
	eventually(t, "server "+id+" ready in "+bootType, 20*time.Second, func() (bool, string) {
		s := call(t, base, http.MethodGet, zoneURL+"/servers/"+id, nil)
		return s["status"] == "ready" && s["boot_type"] == bootType, fmt.Sprint(s["status"], " ", s["boot_type"])
	})
}

// sshRun runs one command on the rescue system with OpenSSH.
func sshRun(t *testing.T, key, command string) (string, string, int) {
	t.Helper()
	cmd := exec.Command("ssh", "-F", "/dev/null", "-i", key, "-p", sshPort,
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
		"rescue@"+serverIP, command)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("ssh: %v", err)
	}
	return stdout.String(), stderr.String(), code
}

func TestMaintenanceAPIThroughTalosClient(t *testing.T) {
	emsimBin := binary(t, "EMSIM_BIN", "emsim")
	talosSimBin := binary(t, "TALOS_SIM_BIN", "talos-sim")
	dir := t.TempDir()

	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	publicKey, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	imagePath := filepath.Join(dir, "metal-amd64.raw.xz")
	if out, err := exec.Command(talosSimBin, "make-image", "--version", version, "--size", "8MiB", "--out", imagePath).CombinedOutput(); err != nil {
		t.Fatalf("make-image: %v %s", err, out)
	}
	images := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer images.Close()

	emsimAddr := freeAddr(t)
	start(t, emsimBin, "--listen", emsimAddr, "--time-scale", "0.001", "--seed", "6", "--ip-range", ipRange)
	emsim := "http://" + emsimAddr
	eventually(t, "emsim healthy", 10*time.Second, func() (bool, string) {
		resp, err := http.Get(emsim + "/_emsim/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	start(t, talosSimBin, "--emsim-url", emsim, "--state-dir", filepath.Join(dir, "state"),
		"--ssh-port", sshPort, "--talos-port", talosPort, "--admin-listen", freeAddr(t), "--install-delay-ms", "100")

	// Order, rescue-boot with the key, image, boot normally.
	call(t, emsim, http.MethodPost, "/iam/v1alpha1/ssh-keys", map[string]any{"name": "conformance", "public_key": strings.TrimSpace(string(publicKey))})
	offers := call(t, emsim, http.MethodGet, zoneURL+"/offers?name=EM-I215E-NVME", nil)
	offerID := offers["offers"].([]any)[0].(map[string]any)["id"]
	server := call(t, emsim, http.MethodPost, zoneURL+"/servers", map[string]any{"offer_id": offerID, "name": "conformance", "tags": []string{}})
	id := server["id"].(string)
	waitReady(t, emsim, id, "normal")
	call(t, emsim, http.MethodPost, zoneURL+"/servers/"+id+"/reboot", map[string]any{"boot_type": "rescue"})
	waitReady(t, emsim, id, "rescue")

	var disk string
	eventually(t, "rescue SSH up", 20*time.Second, func() (bool, string) {
		out, errOut, code := sshRun(t, key, "lsblk -dno NAME,TYPE")
		disk = strings.Fields(out + " x")[0]
		return code == 0, errOut
	})
	write := fmt.Sprintf("set -o pipefail; curl -fsSL '%s/metal-amd64.raw.xz' | xz -d | dd bs=4M iflag=fullblock | sudo tee /dev/%s | sha256sum", images.URL, disk)
	if out, errOut, code := sshRun(t, key, write); code != 0 || !strings.HasSuffix(out, "  -\n") {
		t.Fatalf("image write: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := sshRun(t, key, "sudo sync"); code != 0 {
		t.Fatalf("sync: %d %s", code, errOut)
	}
	call(t, emsim, http.MethodPost, zoneURL+"/servers/"+id+"/reboot", map[string]any{"boot_type": "normal"})
	waitReady(t, emsim, id, "normal")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// What `talosctl --insecure` does: TLS without verifying the maintenance certificate.
	c, err := client.New(ctx,
		client.WithEndpoints(net.JoinHostPort(serverIP, talosPort)),
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // maintenance mode has a self-signed certificate
	)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var versions *machine.VersionResponse
	eventually(t, "maintenance API Version", 20*time.Second, func() (bool, string) {
		versions, err = c.Version(ctx)
		return err == nil, fmt.Sprint(err)
	})
	if len(versions.Messages) != 1 {
		t.Fatalf("Version: %d messages", len(versions.Messages))
	}
	v := versions.Messages[0]
	if v.Version.Tag != version || v.Version.Arch != "amd64" || v.Version.Os != "linux" || v.Platform.GetName() != "metal" {
		t.Fatalf("Version decoded as %+v / %+v", v.Version, v.Platform)
	}

	worker, err := os.ReadFile(filepath.Join("..", "tests", "fixtures", "worker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]string{
		"unparseable YAML":     "machine: [unclosed\n",
		"control plane config": strings.Replace(string(worker), "type: worker", "type: controlplane", 1),
		"unknown machine type": strings.Replace(string(worker), "type: worker", "type: gateway", 1),
		"no cluster endpoint":  strings.Replace(string(worker), "endpoint: https://127.0.0.1:6443", "", 1),
		"no bootstrap token":   strings.Replace(string(worker), "  token: k8sabc.0123456789abcdef\n", "", 1),
		"malformed token":      strings.Replace(string(worker), "token: k8sabc.0123456789abcdef", "token: nope", 1),
	}
	for name, yaml := range rejected {
		if yaml == string(worker) {
			t.Fatalf("%s: the fixture changed, the replacement did not apply", name)
		}
		_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte(yaml), Mode: machine.ApplyConfigurationRequest_AUTO})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: want InvalidArgument, got %v", name, err)
		}
	}

	applied, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: worker, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil {
		t.Fatalf("valid worker config refused: %v", err)
	}
	m := applied.Messages[0]
	if m.Mode != machine.ApplyConfigurationRequest_NO_REBOOT || m.ModeDetails != "Applied configuration without a reboot" {
		t.Fatalf("apply answered mode %s, %q", m.Mode, m.ModeDetails)
	}
}

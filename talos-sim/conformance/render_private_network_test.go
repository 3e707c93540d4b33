package conformance

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// instanceClass is a ScalewayInstanceNodeClass for a base of the minor.
func instanceClass(minor string) string {
	return fmt.Sprintf(`apiVersion: karpenter.scaleway.com/v1alpha1
kind: ScalewayInstanceNodeClass
metadata:
  name: vms
spec:
  zones: [fr-par-2]
  image:
    name: talos-%s.0
  publicIp: dynamic
  machineConfigSecretRef: {name: talos, namespace: karpenter, key: worker.yaml}
`, minor)
}

// privateNetworkCases are the Private Network links render-config renders:
// Elastic Metal (a VLAN on the primary NIC) and Instance (a private NIC),
// each with the node's IPAM address or DHCP, and with the public address as
// the Node's InternalIP. The subnets are loopback ranges, as in the
// simulators.
var privateNetworkCases = []struct {
	name     string
	instance bool
	flags    []string
	want     []string
}{
	{
		name:  "Elastic Metal, static address",
		flags: []string{"--private-vlan", "2345", "--private-address", "127.16.0.7/22", "--private-subnet", "127.16.0.0/22"},
		want:  []string{"kind: VLANConfig", "name: net0.2345", "vlanID: 2345", "parent: net0", "address: 127.16.0.7/22", "- 127.16.0.0/22"},
	},
	{
		name:  "Elastic Metal, DHCP",
		flags: []string{"--private-vlan", "12", "--private-subnet", "127.16.0.0/22"},
		want:  []string{"kind: VLANConfig", "name: net0.12", "kind: DHCPv4Config"},
	},
	{
		name:     "Instance, static address",
		instance: true,
		flags:    []string{"--private-mac", "02:00:00:ab:cd:ef", "--private-address", "127.16.1.9/22", "--private-subnet", "127.16.0.0/22"},
		want:     []string{"name: priv0", `mac(link.permanent_addr) == "02:00:00:ab:cd:ef"`, "kind: LinkConfig", "address: 127.16.1.9/22", "- 127.16.0.0/22"},
	},
	{
		name:     "Instance, DHCP, public node IP",
		instance: true,
		flags:    []string{"--private-mac", "02:00:00:ab:cd:ef", "--private-subnet", "127.16.0.0/22", "--public-node-ip"},
		want:     []string{"kind: LinkConfig", "name: priv0", "kind: DHCPv4Config"},
	},
}

// TestRenderedPrivateNetworkConfigsPassTalosValidation renders each Private
// Network link from the base of each minor that has multi-document network
// config (1.12 and later) and validates the result with the machinery of
// that minor and of every newer one, in metal mode, strict.
func TestRenderedPrivateNetworkConfigsPassTalosValidation(t *testing.T) {
	for i, minor := range talosMinors {
		if minor < "v1.12" {
			continue
		}

		for _, c := range privateNetworkCases {
			t.Run(minor+"/"+c.name, func(t *testing.T) {
				class, flags := nodeClass(minor), append([]string{"--mac", primaryMAC}, c.flags...)
				if c.instance {
					class, flags = instanceClass(minor), append([]string{"--offer", "POP2-2C-8G"}, c.flags...)
				}

				out := renderConfig(t, t.TempDir(), workerConfig(t, minor), class, flags...)
				for _, node := range talosMinors[i:] {
					if _, err := validateAs(t, node, out); err != nil {
						t.Errorf("Talos %s (machinery %s) refuses the Private Network config rendered from a %s base: %v", node, machineryVersion(t, node), minor, err)
					}
				}

				for _, want := range c.want {
					if !bytes.Contains(out, []byte(want)) {
						t.Errorf("rendered config lacks %q; documents:\n%s", want, kinds(out))
					}
				}

				if bytes.Contains(out, []byte("interfaces:")) {
					t.Error("the deprecated machine.network.interfaces was written")
				}
			})
		}
	}
}

// TestPrivateNetworkConfigsAreJudgedByTalos makes sure the validation above
// can fail: a VLAN id out of Talos' range and an address without its prefix
// length, written into a rendered config, are refused by every minor ≥ 1.12.
func TestPrivateNetworkConfigsAreJudgedByTalos(t *testing.T) {
	for _, minor := range talosMinors {
		if minor < "v1.12" {
			continue
		}

		out := string(renderConfig(t, t.TempDir(), workerConfig(t, minor), nodeClass(minor),
			"--mac", primaryMAC, "--private-vlan", "2345", "--private-address", "127.16.0.7/22", "--private-subnet", "127.16.0.0/22"))

		for name, broken := range map[string]string{
			"vlan id 4095":        strings.Replace(out, "vlanID: 2345", "vlanID: 4095", 1),
			"address sans prefix": strings.Replace(out, "address: 127.16.0.7/22", "address: 127.16.0.7", 1),
		} {
			if broken == out {
				t.Fatalf("%s: nothing replaced", name)
			}

			if _, err := validateAs(t, minor, []byte(broken)); err == nil {
				t.Errorf("Talos %s accepts a config with a %s", minor, name)
			}
		}
	}
}

// TestATalos111BaseRefusesPrivateNetworks: render-config fails with the
// reason rather than writing v1alpha1 interfaces.
func TestATalos111BaseRefusesPrivateNetworks(t *testing.T) {
	_, stderr, err := runRenderConfig(t, t.TempDir(), workerConfig(t, "v1.11"), nodeClass("v1.11"),
		"--mac", primaryMAC, "--private-vlan", "2345", "--private-subnet", "127.16.0.0/22")
	if err == nil {
		t.Fatal("render-config rendered a Private Network from a Talos 1.11 base")
	}

	if !strings.Contains(stderr, "Talos 1.12 or later") {
		t.Fatalf("render-config: want the reason, got %s", stderr)
	}
}

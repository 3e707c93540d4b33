package main

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/karpenter/pkg/apis"
)

// writeCRDs writes the CRDs embedded in the linked Karpenter module, so that
// what a test or chart installs is exactly what this binary's core expects.
// CapacityBuffers are used only behind the CapacityBuffer feature gate, but
// the CRD is part of core's set and costs nothing to install.
func writeCRDs(dir string) error {
	files := []struct {
		name    string
		content []byte
	}{
		{"karpenter.sh_nodepools.yaml", apis.NodePoolCRD},
		{"karpenter.sh_nodeclaims.yaml", apis.NodeClaimCRD},
		{"karpenter.sh_nodeoverlays.yaml", apis.NodeOverlayCRD},
		{"autoscaling.x-k8s.io_capacitybuffers.yaml", apis.CapacityBufferCRD},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, f.content, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		fmt.Println(path)
	}
	return nil
}

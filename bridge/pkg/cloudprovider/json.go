package cloudprovider

import (
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/karpenter/pkg/apis"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// Objects read from controller-runtime's cache carry no apiVersion/kind; the
// provider gets complete Kubernetes JSON, as kubectl would show it.
var (
	nodeClaimTypeMeta = metav1.TypeMeta{APIVersion: apis.Group + "/v1", Kind: "NodeClaim"}
	nodePoolTypeMeta  = metav1.TypeMeta{APIVersion: apis.Group + "/v1", Kind: "NodePool"}
)

func encodeNodeClaim(nc *v1.NodeClaim) ([]byte, error) {
	if nc == nil {
		return nil, errors.New("encoding NodeClaim: nil")
	}
	// A shallow copy is enough to set TypeMeta without touching core's object.
	out := *nc
	out.TypeMeta = nodeClaimTypeMeta
	raw, err := json.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("encoding NodeClaim %s: %w", nc.Name, err)
	}
	return raw, nil
}

func decodeNodeClaim(raw []byte) (*v1.NodeClaim, error) {
	if len(raw) == 0 {
		return nil, errors.New("empty NodeClaim JSON")
	}
	nc := &v1.NodeClaim{}
	if err := json.Unmarshal(raw, nc); err != nil {
		return nil, fmt.Errorf("decoding NodeClaim JSON: %w", err)
	}
	return nc, nil
}

func withNodePoolTypeMeta(np *v1.NodePool) *v1.NodePool {
	out := *np
	out.TypeMeta = nodePoolTypeMeta
	return &out
}

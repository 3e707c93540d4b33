package cloudprovider

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// convertInstanceTypes builds Karpenter's instance types from the provider's
// answer. Any malformed entry fails the whole conversion: core treats an error
// as "skip this NodePool this round", which is better than scheduling onto a
// type whose capacity silently became zero.
func convertInstanceTypes(in []*pb.InstanceType) ([]*cloudprovider.InstanceType, error) {
	out := make([]*cloudprovider.InstanceType, 0, len(in))
	seen := make(map[string]struct{}, len(in))
	for _, it := range in {
		if _, dup := seen[it.GetName()]; dup {
			return nil, fmt.Errorf("instance type %q is listed twice", it.GetName())
		}
		seen[it.GetName()] = struct{}{}
		converted, err := convertInstanceType(it)
		if err != nil {
			return nil, fmt.Errorf("converting instance type %q: %w", it.GetName(), err)
		}
		out = append(out, converted)
	}
	return out, nil
}

func convertInstanceType(in *pb.InstanceType) (*cloudprovider.InstanceType, error) {
	if in.GetName() == "" {
		return nil, errors.New("instance type has no name")
	}
	reqs, err := convertRequirements(in.GetRequirements())
	if err != nil {
		return nil, fmt.Errorf("requirements: %w", err)
	}

	offerings := make(cloudprovider.Offerings, 0, len(in.GetOfferings()))
	for i, o := range in.GetOfferings() {
		offering, err := convertOffering(o)
		if err != nil {
			return nil, fmt.Errorf("offering %d: %w", i, err)
		}
		offerings = append(offerings, offering)
	}
	completeWellKnownLabels(reqs, offerings)

	capacity, err := convertResources(in.GetCapacity())
	if err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	// Without these the scheduler sees zero room and never places a pod.
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		if _, ok := capacity[name]; !ok {
			return nil, fmt.Errorf("capacity lacks %s", name)
		}
	}
	overhead := &cloudprovider.InstanceTypeOverhead{}
	if overhead.KubeReserved, err = convertResources(in.GetOverhead().GetKubeReserved()); err != nil {
		return nil, fmt.Errorf("overhead kube_reserved: %w", err)
	}
	if overhead.SystemReserved, err = convertResources(in.GetOverhead().GetSystemReserved()); err != nil {
		return nil, fmt.Errorf("overhead system_reserved: %w", err)
	}
	if overhead.EvictionThreshold, err = convertResources(in.GetOverhead().GetEvictionThreshold()); err != nil {
		return nil, fmt.Errorf("overhead eviction_threshold: %w", err)
	}

	return &cloudprovider.InstanceType{
		Name:         in.GetName(),
		Requirements: reqs,
		Offerings:    offerings,
		Capacity:     capacity,
		Overhead:     overhead,
	}, nil
}

func convertOffering(in *pb.Offering) (*cloudprovider.Offering, error) {
	reqs, err := convertRequirements(in.GetRequirements())
	if err != nil {
		return nil, fmt.Errorf("requirements: %w", err)
	}
	// Core reads both through Offering.CapacityType() and Offering.Zone(); an
	// offering without them would be matched against nothing meaningful.
	for _, key := range []string{v1.CapacityTypeLabelKey, corev1.LabelTopologyZone} {
		if !reqs.Has(key) {
			return nil, fmt.Errorf("requirements lack %s", key)
		}
	}
	return &cloudprovider.Offering{
		Requirements:        reqs,
		Price:               in.GetPrice(),
		Available:           in.GetAvailable(),
		ReservationCapacity: int(in.GetReservationCapacity()),
	}, nil
}

func convertRequirements(in []*pb.Requirement) (scheduling.Requirements, error) {
	reqs := scheduling.NewRequirements()
	for _, r := range in {
		req, err := convertRequirement(r)
		if err != nil {
			return nil, err
		}
		// Add intersects with an earlier requirement on the same key.
		reqs.Add(req)
	}
	return reqs, nil
}

func convertRequirement(in *pb.Requirement) (*scheduling.Requirement, error) {
	if in.GetKey() == "" {
		return nil, errors.New("requirement has an empty key")
	}
	var op corev1.NodeSelectorOperator
	switch in.GetOperator() {
	case pb.Requirement_IN:
		op = corev1.NodeSelectorOpIn
	case pb.Requirement_NOT_IN:
		op = corev1.NodeSelectorOpNotIn
	case pb.Requirement_EXISTS:
		op = corev1.NodeSelectorOpExists
	case pb.Requirement_DOES_NOT_EXIST:
		op = corev1.NodeSelectorOpDoesNotExist
	case pb.Requirement_GT:
		op = corev1.NodeSelectorOpGt
	case pb.Requirement_LT:
		op = corev1.NodeSelectorOpLt
	default:
		return nil, fmt.Errorf("requirement %s: unsupported operator %s", in.GetKey(), in.GetOperator())
	}
	values := in.GetValues()
	switch op {
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(values) != 0 {
			return nil, fmt.Errorf("requirement %s %s: takes no values", in.GetKey(), op)
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		// Karpenter parses the bound with Atoi and ignores the error, so a
		// malformed bound would silently become 0.
		if len(values) != 1 {
			return nil, fmt.Errorf("requirement %s %s: needs exactly one value", in.GetKey(), op)
		}
		if _, err := strconv.Atoi(values[0]); err != nil {
			return nil, fmt.Errorf("requirement %s %s: value %q is not an integer", in.GetKey(), op, values[0])
		}
	}
	var minValues *int
	if in.MinValues != nil {
		if in.GetMinValues() < 1 {
			return nil, fmt.Errorf("requirement %s: minValues %d must be at least 1", in.GetKey(), in.GetMinValues())
		}
		mv := int(in.GetMinValues())
		minValues = &mv
	}
	// NewRequirementWithFlexibility may normalise the values in place.
	return scheduling.NewRequirementWithFlexibility(in.GetKey(), op, minValues, append([]string(nil), values...)...), nil
}

// completeWellKnownLabels gives every well-known label the provider left
// undefined a DoesNotExist requirement. Karpenter requires instance types to
// define every well-known label: an undefined one is treated as "any value", so
// a pod selecting e.g. a region would be scheduled onto a type that will never
// carry that label. The NodePool label is the exception: it comes from the
// NodePool's template, not from the instance type, and a DoesNotExist there
// would make every type incompatible with every NodePool. So are core's
// reserved-capacity labels (the reservation id) on a type sold from a
// reservation: its nodes carry the label or not depending on the offering,
// which no requirement of the type can say (DoesNotExist would turn away a
// pod that selects the reservation, In [id] a pod that avoids reservations).
// Left undefined, core matches them against the offerings alone, whose
// requirements say it exactly.
func completeWellKnownLabels(reqs scheduling.Requirements, offerings cloudprovider.Offerings) {
	reserved := slices.ContainsFunc(offerings, func(o *cloudprovider.Offering) bool {
		return o.CapacityType() == v1.CapacityTypeReserved
	})
	for key := range v1.WellKnownLabels {
		if key == v1.NodePoolLabelKey || reqs.Has(key) {
			continue
		}
		if reserved && cloudprovider.ReservedCapacityLabels.Has(key) {
			continue
		}
		reqs.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpDoesNotExist))
	}
}

func convertResources(in map[string]string) (corev1.ResourceList, error) {
	out := make(corev1.ResourceList, len(in))
	for name, raw := range in {
		q, err := resource.ParseQuantity(raw)
		if err != nil {
			return nil, fmt.Errorf("resource %s: quantity %q: %w", name, raw, err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

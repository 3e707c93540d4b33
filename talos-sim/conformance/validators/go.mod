// Placeholder: this directory is built only with one of the module files
// beside it (go build -modfile=talos-<minor>.mod, see build.sh), each pinning
// one Talos minor's machinery. Go needs a go.mod here to find the module root;
// with -modfile it does not read this one.
module github.com/karpenter-provider-scaleway/talos-sim/conformance/validators

go 1.26.1

#!/usr/bin/env python3
"""The kind config up.sh creates a cluster with: kind-config.yaml plus this host's needs.

kind-config.yaml (repository root) is the one source of the cluster's shape; this adds
what depends on the machine, each only when up.sh passes the flag for it:

  --image IMAGE            every node runs the locally built node image (node-image.sh)
  --cgroup-v1              KubeletConfiguration failCgroupV1: false
  --restrict-oom-score-adj containerd's CRI restrict_oom_score_adj = true

It prints the resulting config (YAML) on stdout.
"""
import argparse
import sys

import yaml


def build(base, args):
    config = dict(base)
    config["name"] = args.name
    nodes = config.get("nodes") or [{"role": "control-plane"}]
    patches = list(config.get("kubeadmConfigPatches") or [])
    containerd = list(config.get("containerdConfigPatches") or [])
    for node in nodes:
        node["image"] = args.image
    config["nodes"] = nodes
    if args.cgroup_v1:
        # Kubernetes 1.35's kubelet refuses to start on cgroup v1 unless told.
        patches.append("kind: KubeletConfiguration\nfailCgroupV1: false\n")
    if args.restrict_oom_score_adj:
        # Without CAP_SYS_RESOURCE nothing may lower an oom_score_adj below the
        # one it inherited (runc: "can't get final child's PID from pipe: EOF");
        # restricted, the CRI never asks for less than containerd's own.
        containerd.append(
            '[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true\n')
    if patches:
        config["kubeadmConfigPatches"] = patches
    if containerd:
        config["containerdConfigPatches"] = containerd
    return config


def literal_blocks(dumper, data):
    """Multi-line strings (the patches) as YAML literal blocks, readable in the file."""
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", help="kind-config.yaml")
    p.add_argument("--name", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--cgroup-v1", action="store_true")
    p.add_argument("--restrict-oom-score-adj", action="store_true")
    args = p.parse_args(argv)
    with open(args.base) as f:
        base = yaml.safe_load(f)
    if base.get("kind") != "Cluster":
        sys.exit(f"{args.base}: not a kind Cluster config")
    yaml.SafeDumper.add_representer(str, literal_blocks)
    yaml.safe_dump(build(base, args), sys.stdout, sort_keys=False, default_flow_style=False)


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""Checks the images hack/images.sh built, and runs each one for real.

    hack/images-check.py --version V IMAGE...

Every image, whatever its architecture (from its metadata and its file system):
- runs as user 65532:65532;
- has no shell and no other program than its own binary: the exported file system
  holds exactly one executable, and nothing named sh, bash, ash or busybox;
- its size is printed (docs/figures.md, "Images").
An image of this host's architecture is also run, on a read-only root filesystem
without network:
- `--version` answers `<binary> V`;
and then the four together, as a user runs them (on a Docker network this script
creates and removes): emsim answers; talos-sim in emsim's network namespace follows it
(its admin API lists emsim's servers); karpenter-scaleway's `catalog` reads emsim's
offers over the network; karpenter-bridge writes Karpenter's CRDs into a mounted
directory. Everything started is removed, on success and on failure.
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

DOCKER = "/usr/bin/docker"
SHELLS = {"sh", "bash", "ash", "dash", "busybox"}
SHARED_OBJECT = re.compile(r"^(usr/)?lib(64)?/([^/]+/)?[^/]+\.so(\.[0-9]+)*$")
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
# Test-only credentials of the throwaway emsim.
SECRET = "6e0b2c4d-8f1a-4b3c-9d2e-7a5f1c3b9e8d"
PROJECT = "4d7a1a49-7bcb-4b3e-9c2e-1f0d5c1e2b3a"


def docker(*args, check=True, capture=True):
    r = subprocess.run([DOCKER, *args], capture_output=capture, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def binary_of(image):
    """karpenter-scaleway for kps.local/karpenter-scaleway:0.1.0-arm64."""
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


def files_of(image):
    """(path, is_executable_file) of every entry of the image's layers (`docker save`:
    the image as built, without what a container adds)."""
    with tempfile.TemporaryFile() as f:
        subprocess.run([DOCKER, "image", "save", image], stdout=f, check=True)
        f.seek(0)
        out = {}
        with tarfile.open(fileobj=f) as outer:
            for m in outer.getmembers():
                if not m.name.endswith("layer.tar"):
                    continue
                with tarfile.open(fileobj=outer.extractfile(m)) as layer:
                    for e in layer.getmembers():
                        out[e.name] = e.isfile() and bool(e.mode & 0o111)
        return sorted(out.items())


def check_static(image, failures):
    meta = json.loads(docker("image", "inspect", image).stdout)[0]
    user = meta["Config"].get("User", "")
    if user != "65532:65532":
        failures.append(f"{image}: runs as {user or 'root'!r}, not 65532:65532")
    files = files_of(image)
    names = {os.path.basename(p.rstrip("/")) for p, _ in files}
    if names & SHELLS:
        failures.append(f"{image}: ships a shell: {sorted(names & SHELLS)}")
    # Shared objects (the C library of a test-binaries image, hack/images.sh) are
    # executable files too, but no program.
    executables = [p for p, x in files if x and not SHARED_OBJECT.search(p)]
    binary = binary_of(image)
    if [os.path.basename(p) for p in executables] != [binary]:
        failures.append(f"{image}: executables {executables}, want only {binary}")
    size = meta["Size"]
    print(f"  {image}: {meta['Architecture']}, user {user}, {size / 1e6:.1f} MB, "
          f"{len(files)} entries, executable {executables}")
    return meta["Architecture"], size


def check_version(image, version, failures):
    binary = binary_of(image)
    r = docker("run", "--rm", "--read-only", "--network", "none", image, "--version", check=False)
    out = r.stdout.strip()
    if r.returncode != 0 or not out.startswith(f"{binary} {version}"):
        failures.append(f"{image}: --version answered {out!r} (exit {r.returncode}, "
                        f"stderr {r.stderr.strip()!r}), want '{binary} {version}...'")
    else:
        print(f"  {image}: --version: {out}")


def wait_http(url, what, seconds=30):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except OSError as e:
            last = e
            time.sleep(0.3)
    raise RuntimeError(f"{what} did not answer at {url} in {seconds} s: {last}")


def run_together(images, failures):
    """The four images running as a user runs them; removes what it starts."""
    by = {binary_of(i): i for i in images}
    net = f"kps-images-check-{os.getpid()}"
    started = []
    out_dir = tempfile.mkdtemp(prefix="kps-images-check-")
    try:
        docker("network", "create", net)
        emsim = f"{net}-emsim"
        docker("run", "-d", "--read-only", "--name", emsim, "--network", net, by["emsim"],
               "--time-scale", "0.01", "--secret-key", SECRET, "--project-id", PROJECT)
        started.append(emsim)
        ip = docker("inspect", "-f", f"{{{{(index .NetworkSettings.Networks \"{net}\").IPAddress}}}}",
                    emsim).stdout.strip()
        wait_http(f"http://{ip}:7080/_emsim/counters", "emsim")
        print(f"  emsim answers on {ip}:7080")

        talos = f"{net}-talos-sim"
        docker("run", "-d", "--read-only", "--name", talos, "--network", f"container:{emsim}",
               "--tmpfs", "/state:uid=65532,gid=65532", by["talos-sim"],
               "--emsim-url", "http://127.0.0.1:7080")
        started.append(talos)
        servers = json.loads(wait_http(f"http://{ip}:7090/_talossim/servers", "talos-sim admin"))
        if isinstance(servers, dict):
            servers = servers.get("servers", [])
        print(f"  talos-sim follows emsim: admin API lists {len(servers)} servers")

        r = docker("run", "--rm", "--read-only", "--network", net,
                   "-e", f"SCW_SECRET_KEY={SECRET}", "-e", f"SCW_DEFAULT_PROJECT_ID={PROJECT}",
                   "-e", f"SCW_API_URL=http://{ip}:7080", by["karpenter-scaleway"],
                   "catalog", "--output", "json", check=False)
        try:
            catalog = json.loads(r.stdout)
        except ValueError:
            catalog = None
        if r.returncode != 0 or not catalog:
            failures.append(f"karpenter-scaleway catalog against emsim: exit {r.returncode}, "
                            f"stdout {r.stdout[:300]!r}, stderr {r.stderr[-500:]!r}")
        else:
            print(f"  karpenter-scaleway catalog read emsim's offers over the network "
                  f"({len(r.stdout)} bytes of JSON)")

        os.chown(out_dir, 65532, 65532)
        r = docker("run", "--rm", "--read-only", "--network", "none", "-v", f"{out_dir}:/out",
                   by["karpenter-bridge"], "crds", "/out", check=False)
        crds = sorted(os.listdir(out_dir))
        if r.returncode != 0 or not any("nodepools" in c for c in crds):
            failures.append(f"karpenter-bridge crds: exit {r.returncode}, wrote {crds}, "
                            f"stderr {r.stderr[-500:]!r}")
        else:
            print(f"  karpenter-bridge wrote {len(crds)} CRDs: {', '.join(crds)}")
    except RuntimeError as e:
        failures.append(str(e))
        for c in started:
            logs = docker("logs", "--tail", "20", c, check=False)
            print(f"  --- {c} logs ---\n{logs.stdout}{logs.stderr}", file=sys.stderr)
    finally:
        for c in reversed(started):
            docker("rm", "-f", c, check=False)
        docker("network", "rm", net, check=False)
        shutil.rmtree(out_dir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--version", required=True)
    p.add_argument("images", nargs="+")
    a = p.parse_args()
    failures = []
    native = []
    print("images-check:")
    for image in a.images:
        arch, _ = check_static(image, failures)
        if arch == HOST_ARCH:
            check_version(image, a.version, failures)
            native.append(image)
    if {binary_of(i) for i in native} >= {"emsim", "talos-sim", "karpenter-scaleway",
                                           "karpenter-bridge"}:
        run_together(native, failures)
    for f in failures:
        print(f"images-check: FAIL: {f}")
    print(f"images-check: {len(a.images)} images, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

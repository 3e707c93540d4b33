#!/usr/bin/env python3
"""runc without CAP_SYS_RESOURCE, for hosts whose root lacks it (hack/docker.sh).

On these machines root's bounding set has no CAP_SYS_RESOURCE, and runc refuses to start a
container whose spec asks for a capability the caller cannot grant ("unable to apply caps:
operation not permitted"). Docker grants every capability to a privileged container (kind's
nodes, `docker exec --privileged`), and `--cap-drop` does not reach that path. This wrapper
removes that one capability from the OCI spec runc is about to read, then runs runc with the
same arguments:

- `create` / `run`: the bundle's config.json (`--bundle DIR`, `-b DIR`, or the working
  directory, runc's default);
- `exec`: the process file (`--process FILE`, `-p FILE`).
"""
import json
import os
import sys

RUNC = os.environ.get("KPS_RUNC", "/usr/sbin/runc")
CAP = "CAP_SYS_RESOURCE"
KINDS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def strip_process(process):
    caps = process.get("capabilities") or {}
    changed = False
    for kind in KINDS:
        if CAP in caps.get(kind, []):
            caps[kind] = [c for c in caps[kind] if c != CAP]
            changed = True
    return changed


def rewrite(path, key):
    with open(path) as f:
        spec = json.load(f)
    process = spec.get(key, {}) if key else spec
    if strip_process(process):
        tmp = path + ".kps-tmp"
        with open(tmp, "w") as f:
            json.dump(spec, f)
        os.replace(tmp, path)


def flag_value(args, names):
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a[len(n) + 1:]
    return None


def command(args):
    """The runc subcommand: the first argument that is not a global flag or its value."""
    valued = {"--root", "--log", "--log-format", "--criu", "--rootless"}
    i = 0
    while i < len(args):
        a = args[i]
        if a in valued:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return a, args[i + 1:]
    return None, []


def main():
    args = sys.argv[1:]
    cmd, rest = command(args)
    try:
        if cmd in ("create", "run"):
            bundle = flag_value(rest, ("--bundle", "-b")) or os.getcwd()
            rewrite(os.path.join(bundle, "config.json"), "process")
        elif cmd == "exec":
            process = flag_value(rest, ("--process", "-p"))
            if process:
                rewrite(process, None)
    except (OSError, ValueError) as e:
        print(f"runc-wrapper: {e}", file=sys.stderr)
    os.execv(RUNC, [RUNC] + args)


if __name__ == "__main__":
    main()

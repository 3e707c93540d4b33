#!/usr/bin/env bash
# Installs what the build needs and a fresh machine of this kind lacks:
# protoc (Debian's protobuf-compiler), PyYAML and ShellCheck (Debian's python3-yaml,
# shellcheck) and just (PyPI's rust-just wheel).
# Go and Rust toolchains are expected on the machine. Idempotent and quiet.
set -euo pipefail
need_apt=()
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
command -v xz >/dev/null 2>&1 || need_apt+=(xz-utils)
# OpenSSH's client: talos-sim's rescue SSH is tested against it (talos-sim/tests/openssh.rs).
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
# PyYAML: hack/chart-check.sh and the chart scripts read YAML with it.
python3 -c 'import yaml' >/dev/null 2>&1 || need_apt+=(python3-yaml)
# ShellCheck: `just lint` has actionlint run it on every `run:` step of .github/workflows/.
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bootstrap: installing ${need_apt[*]} (apt)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v just >/dev/null 2>&1 && [ ! -x "$HOME/.local/bin/just" ]; then
  echo "bootstrap: installing just (pip rust-just)"
  python3 -m pip install --quiet --user --disable-pip-version-check rust-just 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check rust-just
fi
for t in go cargo; do
  command -v "$t" >/dev/null 2>&1 || { echo "bootstrap: $t is required but not installed" >&2; exit 1; }
done

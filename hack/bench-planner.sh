#!/usr/bin/env bash
# The planner replay (docs/planner.md "What it saves"): the shipped traces (or
# the one named by $1: a shipped name or a CSV file) replayed through the
# planner, standby and billing code, under each step of the planner's
# settings, so that each change's effect shows. Offline: no API is read.
#
#   KPS_PROVIDER_BIN   the karpenter-scaleway binary (default target/debug)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${KPS_PROVIDER_BIN:-$root/target/debug/karpenter-scaleway}"
trace=("$@")

step() {
	printf '\n== %s\n' "$1"
	shift
	"$bin" plan replay "${trace[@]}" "$@"
}

step "1. the NodeClass defaults (window 2h, hold 30m), no look-ahead" --window 2h --hold 30m
step "2. + ahead 20m: staged ahead of the load seen a day or a week before" --window 2h --hold 30m --ahead 20m
step "3. + window 1h, hold 10m: the recommended settings (examples/vm-first-warm-metal.yaml)" --window 1h --hold 10m --ahead 20m
step "4. the recommended settings staging EM-A115X-SSD instead (4 threads, 0.091 EUR/h)" --window 1h --hold 10m --ahead 20m --offer EM-A115X-SSD
step "5. the recommended settings billed monthly" --window 1h --hold 10m --ahead 20m --billing monthly

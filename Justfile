# karpenter-provider-scaleway — build, test, demo.
# Quick start: `./dev demo` and `./dev test` (they install just/protoc first).

set shell := ["bash", "-euo", "pipefail", "-c"]
set export := true

root := justfile_directory()
cache := root / ".cache"
KPS_RUST_BIN_DIR := root / "target/debug"
KPS_BRIDGE_BIN := cache / "bin/karpenter-bridge"
KPS_KARPENTER_CRDS := cache / "karpenter-crds"
# Go toolchain of every Go build and test: Karpenter core v1.15 (bridge/go.mod)
# needs go >= 1.26.9; the go command fetches this one as a module (once per
# machine). Exported like every variable here; set GOTOOLCHAIN to override.
GOTOOLCHAIN := env_var_or_default("GOTOOLCHAIN", "go1.27.3")
# Go builds without cgo: the bridge's binary is static, so the image copies the
# one the tests ran, and every go command shares one cache.
CGO_ENABLED := env_var_or_default("CGO_ENABLED", "0")
# Incremental compilation only pays off for repeated edits of the same crate;
# for these recipes it doubles the target directory (gigabytes on a cold build).
CARGO_INCREMENTAL := env_var_or_default("CARGO_INCREMENTAL", "0")

default:
    @just --list

# Rust binaries: karpenter-scaleway, emsim, talos-sim, kps-demo. The test
# recipes build with `--tests` instead (dev-dependency features on, as
# `cargo test --workspace` has them), so that Cargo compiles the dependency
# graph once rather than once per feature set.
build-rust:
    cargo build --bins

# The Karpenter host (Go), linked with upstream Karpenter core
build-bridge:
    bridge/build.sh | tail -n 1

# karpenter.sh CRDs of the pinned Karpenter module
karpenter-crds:
    rm -rf {{KPS_KARPENTER_CRDS}} && mkdir -p {{KPS_KARPENTER_CRDS}}
    cd bridge && cp "$(go list -m -f '{{{{.Dir}}' sigs.k8s.io/karpenter)"/pkg/apis/crds/*.yaml {{KPS_KARPENTER_CRDS}}/
    chmod u+w {{KPS_KARPENTER_CRDS}}/*.yaml

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (v1.35), cached
kube-bins:
    e2e/kube/build.sh | tail -n 1

# talos-config: Talos' machinery as a command (`gen` a worker config as
# talosctl gen config does, `validate` one as a node does), cached; the e2e
# base config and talos-sim's --config-validator
talos-config:
    talos-sim/conformance/build.sh | tail -n 1

# Regenerate the renderer's base configs (one per supported Talos minor; throwaway
# secrets; install/driver_tests.rs names the v1.13 file's cluster.token id)
talos-testdata: talos-config
    for v in v1.11 v1.12 v1.13 v1.14; do \
        { echo "# talos-config gen -cluster-name demo -endpoint https://10.0.0.1:6443 -talos-version $v -kubernetes-version 1.35.0"; \
          echo "# (Talos machinery's generate package, what \`talosctl gen config\` runs): throwaway secrets, test data only."; \
          {{cache}}/bin/talos-config gen -cluster-name demo -endpoint https://10.0.0.1:6443 -talos-version $v -kubernetes-version 1.35.0; \
        } > controller/src/talos/testdata/worker-$v.yaml; \
    done

build: build-rust build-bridge karpenter-crds

# Regenerate the committed Go code of the proto
proto:
    proto/gen.sh

# Fails if regenerating the proto's Go code changes anything
proto-check:
    proto/check.sh

# Unit and integration tests (Rust workspace without e2e, Go bridge)
unit:
    cargo test --workspace --exclude e2e
    cd bridge && go vet ./... && go test -v ./... | grep -E "^(=== RUN|--- (PASS|FAIL)|ok|FAIL|PASS)" ; test "${PIPESTATUS[0]}" -eq 0
    just sim-conformance

# The simulators against independent clients: the Scaleway Go SDK (emsim),
# Talos' Go client library and OpenSSH's ssh (talos-sim); rendered configs
# against each supported Talos minor's machinery (validators/, one source
# built per minor with its module file talos-v*.mod, by talos-sim/conformance's
# tests)
sim-conformance:
    cargo build --workspace --exclude e2e --bins --tests
    for m in emsim/conformance talos-sim/conformance talos-sim/conformance/validators; do (cd "$m" && f=$(gofmt -l .) && { test -z "$f" || { echo "gofmt: $m: $f"; exit 1; }; }); done
    for m in emsim/conformance talos-sim/conformance; do (cd "$m" && go vet ./...); done
    for f in talos-sim/conformance/validators/talos-v*.mod; do (cd talos-sim/conformance/validators && go vet -modfile="$(basename "$f")" ./...); done
    for m in emsim/conformance talos-sim/conformance; do (cd "$m" && go test -count=1 -v ./... | grep -E "^(=== RUN|--- (PASS|FAIL)|ok|FAIL|PASS)" ; test "${PIPESTATUS[0]}" -eq 0); done

# rustfmt, clippy, gofmt; the release's one version (hack/version-check.py); the
# workflows of .github/workflows/ through actionlint, which runs ShellCheck on their
# `run:` steps (hack/bootstrap.sh installs it; actionlint would skip a missing one
# silently, so its absence fails here)
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    test -z "$(cd bridge && gofmt -l $(git ls-files '*.go' | grep -v '^gen/' || true))"
    python3 hack/version-check.py
    command -v shellcheck >/dev/null || { echo "lint: no shellcheck for actionlint (hack/bootstrap.sh installs it)" >&2; exit 1; }
    "$(hack/actionlint.sh | tail -n 1)" -shellcheck "$(command -v shellcheck)"

# Karpenter core's own e2e suites (regression, disruption, performance of the
# sigs.k8s.io/karpenter module at the bridge's version, compiled as published)
# against this provider on a local stack; KIND is metal or instance, FOCUS a
# Ginkgo regular expression. docs/conformance.md has the results.
conformance SUITE="regression" KIND="metal" FOCUS="": build-bridge karpenter-crds talos-config
    cargo build --workspace --bins --tests
    KPS_CORE_SUITES_DIR="$(hack/core-suites.sh | tail -n 1)" KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" \
        target/debug/kps-conformance --suite "{{SUITE}}" --kind "{{KIND}}" {{ if FOCUS != "" { "--focus '" + FOCUS + "'" } else { "" } }}

# Core's performance suite twice on one local control plane: against this
# provider (KIND metal or instance) and against core's own KWOK provider
# (hack/kwok.sh builds it and KWOK); the figures side by side with their
# ratio (docs/figures.md). Needs root (a veth pair into a network namespace
# it creates, for a non-loopback Pod address).
perf FOCUS="Basic Deployment" KIND="metal": build-bridge karpenter-crds talos-config
    cargo build --workspace --bins --tests
    KPS_CORE_SUITES_DIR="$(hack/core-suites.sh | tail -n 1)" KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" KPS_KWOK_DIR="$(hack/kwok.sh | tail -n 1)" \
        target/debug/kps-perf --focus "{{FOCUS}}" --kind "{{KIND}}" --out docs/perf

# End-to-end: real control plane + real Karpenter core + simulators. The
# scenarios and the shards of core's regression suite run KPS_E2E_JOBS
# (default 5) at a time, longest first, each on its own stack
# (hack/e2e-run.py, which also builds the Rust binaries, with the features of
# `cargo test --workspace`); `cargo test -p e2e --test scenarios -- <name>::`
# runs one.
e2e: build-bridge karpenter-crds talos-config
    KPS_PROMTOOL="$(hack/promtool.sh | tail -n 1)" KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" KPS_CORE_SUITES_DIR="$(hack/core-suites.sh | tail -n 1)" python3 hack/e2e-run.py

# Tests of the hack/ scripts whose output CI reads (the e2e runner's failure
# digest, the test summary) and of the dashboard picture's renderer
hack-test:
    python3 hack/e2e_run_test.py
    python3 hack/dashboard_render_test.py
    python3 hack/version_check_test.py
    python3 hack/trace_from_prometheus_test.py

# Set the release version NEW (X.Y.Z) everywhere at once: Cargo.toml, Cargo.lock, both
# charts, the bridge, and CHANGELOG.md's Unreleased section becomes NEW's; then commit
# and push the tag vNEW (.github/workflows/release.yml publishes it)
release-version NEW:
    python3 hack/release-version.py "{{NEW}}"

# The provider in a kind cluster, installed as a user installs it
# (hack/e2e-kind.sh): the images built and checked, the charts pushed to a
# local OCI registry, then per scenario a fresh cluster (node image built
# locally and cached), `helm install` from the chart directories or the
# registry, the release checked, and the scenario's assertions. A release
# requires it (docs/figures.md has its last run). Needs root (Docker).
e2e-kind:
    hack/e2e-kind.sh

# A kind cluster on the locally built node image (hack/kind/up.sh prints its
# kubeconfig), and its removal
kind-up NAME="kps-e2e":
    hack/kind/up.sh "{{NAME}}"

kind-down NAME="kps-e2e":
    hack/kind/down.sh "{{NAME}}"

# hack/chart-check.sh: CRDs equal their sources, lint, template, env names; with
# KPS_KUBECONFIG set, also a server-side dry-run of the charts and examples/.
# Helm charts and examples/ checks
chart-check:
    cargo build --workspace --exclude e2e --bins --tests
    mkdir -p {{root}}/.work
    KPS_METRICS_EXPOSITION={{root}}/.work/provider-metrics.txt cargo test -q -p karpenter-scaleway --lib -- metrics::tests::every_family_is_exposed_once_counted --exact
    KPS_PROVIDER_METRICS={{root}}/.work/provider-metrics.txt KPS_PROVIDER_BIN="$KPS_RUST_BIN_DIR/karpenter-scaleway" hack/chart-check.sh

# Container images: karpenter-scaleway, karpenter-bridge, emsim, talos-sim, from
# their Dockerfiles, on this machine (no public image is pulled: the binaries are
# built here and the runtime base is made from Debian's CA certificates), then
# checked and run (hack/images-check.py): REGISTRY/<name>:TAG, TAG defaulting to
# the workspace version. KPS_IMAGE_ARCHES="amd64 arm64" builds both.
images TAG="" REGISTRY="kps.local":
    hack/docker.sh run hack/images.sh "{{TAG}}" "{{REGISTRY}}"

# The same four Dockerfiles, stages and checks over the binaries the tests
# built (hack/images.sh, KPS_IMAGES_BINARIES=test: no second compile of the
# workspace), tagged <version>-test: what CI builds and runs
images-test:
    hack/docker.sh run env KPS_IMAGES_BINARIES=test hack/images.sh

# The same Dockerfiles as a user builds them, with their public base images
# (needs a registry to pull from; the release workflow builds this way).
images-public TAG="dev" REGISTRY="localhost":
    for spec in karpenter-scaleway:controller karpenter-bridge:bridge emsim:emsim talos-sim:talos-sim; do \
        DOCKER_BUILDKIT=1 docker build -f "${spec#*:}/Dockerfile" -t "{{REGISTRY}}/${spec%%:*}:{{TAG}}" . ; \
    done

# Everything CI runs
test: proto-check lint unit hack-test chart-check e2e images-test

# The benchmarks' binaries, with the one feature set of the test path (docs/development.md "Disk")
build-bench: build-bridge karpenter-crds
    cargo build --workspace --bins --tests

# Install overhead: N nodes against the simulators, flow split into platform waits and provider time (docs/figures.md)
bench-install *ARGS: build-bench
    KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" {{KPS_RUST_BIN_DIR}}/kps-bench-install {{ARGS}}

# 100 installs at once against emsim with its rate limit on: calls per node, 429s, RSS and CPU, first NodeClaim to last Node Ready (docs/figures.md "Scale")
bench-scale *ARGS: build-bench
    KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" {{KPS_RUST_BIN_DIR}}/kps-bench-scale {{ARGS}}

# The planner replayed on load traces (the shipped ones, or TRACE: a shipped name or a CSV file) against VMs only, metal sized for the peak and the hindsight optimum, each planner change's effect (docs/planner.md "What it saves")
bench-planner *TRACE:
    cargo build -p karpenter-scaleway --bin karpenter-scaleway
    hack/bench-planner.sh {{TRACE}}

# Karpenter's scheduler over the EM catalog (1000 pods), in-process vs through the bridge + Rust provider; GetInstanceTypes latency (docs/figures.md)
bench-catalog ROUNDS="30":
    cargo build -p emsim -p karpenter-scaleway --bins
    mkdir -p {{root}}/.work
    cd bridge && go test -run '^$' -bench '^BenchmarkScheduling' -benchtime {{ROUNDS}}x ./pkg/cloudprovider | tee {{root}}/.work/bench-catalog.txt
    cd bridge && go test -run '^$' -bench '^BenchmarkGetInstanceTypes' ./pkg/cloudprovider | tee -a {{root}}/.work/bench-catalog.txt

# The same with both kinds served (EM catalog + the real Instance catalog of the 9 zones, `catalog --serve --kind all`): 1000 pods on an Instance NodePool, then on EM + Instance NodePools, interleaved (docs/figures.md)
bench-catalog-combined ROUNDS="30":
    cargo build -p emsim -p karpenter-scaleway --bins
    mkdir -p {{root}}/.work
    cd bridge && go test -run '^$' -bench '^BenchmarkCombinedSchedulingInterleaved$' -benchtime {{ROUNDS}}x -timeout 60m ./pkg/cloudprovider | tee {{root}}/.work/bench-catalog-combined.txt
    cd bridge && go test -run '^$' -bench '^BenchmarkCombinedGetInstanceTypes$' ./pkg/cloudprovider | tee -a {{root}}/.work/bench-catalog-combined.txt

# The whole system against the simulators, with a live view
demo *ARGS: build
    KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" {{KPS_RUST_BIN_DIR}}/kps-demo {{ARGS}}

# Prometheus built from its Go module (hack/prometheus.sh) scrapes the provider
# and Karpenter core during one e2e scenario (hybrid by default), then
# hack/dashboard-render.py draws the chart's dashboard from that Prometheus'
# answers to the dashboard's own queries (docs/dashboard-picture.md). Not in
# CI; KPS_DASHBOARD_DATA=<.work/…/prometheus> renders a kept run again.
# The docs' picture of the dashboard from a real e2e run: docs/img/dashboard.png
dashboard-picture: build-bridge karpenter-crds talos-config
    hack/dashboard-picture.sh

# Warm metal: a standby's adoption against a cold install of the same offer at time scale 1 (emsim's own timings), docs/figures.md "Warm metal"
standby-figures: build
    KPS_TIME_SCALE=1 KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" cargo test -p e2e --test scenarios -- --ignored --nocapture standby::standby_figures_adoption_against_a_cold_install

# The soak at real Scaleway timings (about an hour and a quarter, by hand,
# not in CI), four stacks at once: the warm path (planner, standby,
# consolidation onto it), the cold path (on-demand metal replacing VMs), and
# repair by reboot at Elastic Metal's reboot durations (cured in place;
# rebooted twice, then replaced); prints the timelines recorded in
# docs/figures.md, "The hybrid soak" and "Repair by reboot at real timings".
soak: build
    KPS_KUBE_BIN_DIR="$(e2e/kube/build.sh | tail -n 1)" cargo test -p e2e --test scenarios -- --ignored --nocapture --test-threads 4 soak::

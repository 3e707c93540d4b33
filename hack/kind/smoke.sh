#!/usr/bin/env bash
# Checks that the kind cluster NAME (default kps-e2e) does what the e2e needs:
#
#   1. the host reaches the API server, through kind's port on 127.0.0.1 (the
#      kubeconfig) and at the node's address on the kind network (:6443);
#   2. the node is Ready;
#   3. an image built here (hack/kind/smoke/main.go, FROM scratch) loaded with
#      `kind load docker-image` runs as a Pod behind a ClusterIP Service, which
#      the host reaches through the API server's Service proxy;
#   4. a second Pod reaches it by the Service's DNS name (CoreDNS, kube-proxy),
#      reaches the API server by the `kubernetes` Service's name and at the
#      node's address (trusting the cluster CA of its ServiceAccount), and reaches
#      a server on the host at the kind network's gateway address.
#
#   hack/kind/smoke.sh [NAME]          checks a cluster made by hack/kind/up.sh
#   hack/kind/smoke.sh --fresh [NAME]  up.sh, the checks, down.sh; then checks that
#                                      the host's links, iptables and nftables rules,
#                                      Docker networks and /lib/modules are as before
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

fresh=""
if [[ "${1:-}" == --fresh ]]; then
	fresh=1
	shift
fi
name="${1:-kps-e2e}"
ns=kps-smoke
kubeconfig="${KPS_KIND_KUBECONFIG:-$cache_root/kind-clusters/$name/kubeconfig}"
kind="$("$kind_dir/kind.sh" | tail -n 1)"
kubectl="$("$repo_root/e2e/kube/build.sh" | tail -n 1)/kubectl"
kind() { PATH="$(dirname "$DOCKER"):$PATH" KIND_EXPERIMENTAL_PROVIDER=docker "$kind" "$@"; }
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
step() { printf 'smoke: %s\n' "$*" >&2; }

# What a cluster could leave on the host. Counters and comments vary; rules do not.
host_state() {
	ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print "link " $2 }' | sort
	{ iptables-save; ip6tables-save; } 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'
	! command -v nft >/dev/null || nft list ruleset
	"$DOCKER" network ls --format 'network {{.Name}}' | sort
	[[ ! -e /lib/modules ]] || echo "dir /lib/modules"
}

dir="$(mktemp -d)"
host_server=""
before=""
on_exit() {
	local rc=$?
	[[ -z "$host_server" ]] || kill "$host_server" 2>/dev/null || true
	rm -rf "$dir"
	if [[ -n "$fresh" ]]; then
		"$kind_dir/down.sh" "$name" || rc=1
		if ! diff <(echo "$before") <(host_state) >&2; then
			step "FAIL: the host is not as before (diff above: < before, > after)"
			rc=1
		else
			step "host state after down.sh: as before"
		fi
	fi
	exit "$rc"
}
trap on_exit EXIT

if [[ -n "$fresh" ]]; then
	before="$(host_state)"
	t=$SECONDS
	kubeconfig="$("$kind_dir/up.sh" "$name" | tail -n 1)"
	step "up.sh: $((SECONDS - t))s"
fi
start=$SECONDS
[[ -f "$kubeconfig" ]] || die "no kubeconfig $kubeconfig: run hack/kind/up.sh $name"
node="$name-control-plane"
node_ip="$("$DOCKER" inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$node")"

step "1. the API server from the host: $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}') and https://$node_ip:6443"
[[ "$(k get --raw /readyz)" == ok ]]
[[ "$(k --server "https://$node_ip:6443" get --raw /readyz)" == ok ]]

step "2. node $node Ready"
k wait --for=condition=Ready "node/$node" --timeout=60s >&2

src="$kind_dir/smoke/main.go"
image="kps.local/kind-smoke:$(sha256sum <"$src" | cut -c1-12)"
step "3. $image, loaded with kind load docker-image"
(cd "$kind_dir/smoke" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dir/kps-smoke" main.go)
if ! "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
	"$DOCKER" build -q -t "$image" -f - "$dir" >/dev/null <<-'EOF'
		FROM scratch
		COPY kps-smoke /kps-smoke
		ENTRYPOINT ["/kps-smoke"]
	EOF
fi
kind load docker-image "$image" --name "$name" >&2

k delete namespace "$ns" --ignore-not-found --wait >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: { name: $ns }
---
apiVersion: v1
kind: Pod
metadata: { name: echo, namespace: $ns, labels: { app: echo } }
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: echo
      image: $image
      imagePullPolicy: Never
      args: [serve, ":8080"]
      ports: [{ name: http, containerPort: 8080 }]
      readinessProbe: { httpGet: { path: /, port: http }, periodSeconds: 1 }
---
apiVersion: v1
kind: Service
metadata: { name: echo, namespace: $ns }
spec:
  selector: { app: echo }
  ports: [{ port: 80, targetPort: http }]
EOF
k -n "$ns" wait --for=condition=Ready pod/echo --timeout=120s >&2
# The way a test scrapes a Pod's /metrics from the host: the API server's proxy
# to the Service (API server -> Pod network inside the node).
[[ "$(k get --raw "/api/v1/namespaces/$ns/services/echo:80/proxy/")" == "kps-smoke echo" ]] ||
	die "FAIL: echo does not answer through the API server's Service proxy"

# The same program serving on the host, at the kind network's gateway (the
# host's address on that bridge): Pods reach it as the node (bridge CNI ipMasq).
gateway=""
for g in $("$DOCKER" network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}'); do
	[[ "$g" == *.* ]] && gateway="$g" && break
done
[[ -n "$gateway" ]] || die "no IPv4 gateway on the Docker network kind"
port="$(python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$gateway")"
"$dir/kps-smoke" serve "$gateway:$port" &
host_server=$!

step "4. a Pod reaching echo.$ns.svc.cluster.local, the API server and the host ($gateway:$port)"
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: { name: client, namespace: $ns }
spec:
  restartPolicy: Never
  containers:
    - name: client
      image: $image
      imagePullPolicy: Never
      args:
        - get
        - http://echo.$ns.svc.cluster.local/
        - https://kubernetes.default.svc.cluster.local/version
        - https://$node_ip:6443/version
        - http://$gateway:$port/
EOF
if ! k -n "$ns" wait --for=jsonpath='{.status.phase}'=Succeeded pod/client --timeout=150s >&2; then
	k -n "$ns" logs client >&2 || true
	k -n "$ns" get pods,services,endpointslices -o wide >&2 || true
	die "FAIL: the client Pod did not succeed"
fi
answers="$(k -n "$ns" logs client)"
echo "$answers" >&2
grep -q "^http://echo\.$ns\.svc\.cluster\.local/: 200 OK kps-smoke echo$" <<<"$answers" ||
	die "FAIL: echo's answer is not in the client's log"
grep -q "^http://$gateway:$port/: 200 OK kps-smoke $(hostname)$" <<<"$answers" ||
	die "FAIL: the host's answer is not in the client's log"
k delete namespace "$ns" --wait=false >/dev/null
step "PASS in $((SECONDS - start))s"

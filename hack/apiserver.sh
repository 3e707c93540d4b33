#!/usr/bin/env bash
# A throwaway API server (etcd + kube-apiserver from e2e/kube/build.sh, no
# controllers, no nodes) for checks that only need the API: server-side dry-runs,
# CRD validation, RBAC evaluation.
#
#   hack/apiserver.sh start DIR   start it with its state in DIR (must not exist or be
#                                 empty); prints DIR/kubeconfig (admin) when /readyz is ok
#   hack/apiserver.sh stop DIR    stop both processes and delete DIR
#
#   KPS_KUBE_BIN_DIR   control-plane binaries (default: the output of e2e/kube/build.sh)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'apiserver.sh: %s\n' "$*" >&2; }

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
	local dir="$1" name pid
	for name in kube-apiserver etcd; do
		[[ -f "$dir/$name.pid" ]] || continue
		pid="$(cat "$dir/$name.pid")"
		# Each runs in its own session (setsid): its pid is its process group.
		kill -TERM -- "-$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-$pid" 2>/dev/null || true
	done
	rm -rf "$dir"
}

start() {
	local dir="$1"
	if [[ -e "$dir" && -n "$(ls -A "$dir")" ]]; then
		log "$dir is not empty"
		exit 1
	fi
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	local bin="${KPS_KUBE_BIN_DIR:-$("$root/e2e/kube/build.sh" | tail -n 1)}"
	local etcd_client etcd_peer api
	etcd_client="$(free_port)" etcd_peer="$(free_port)" api="$(free_port)"

	# A CA, an admin client certificate (system:masters) and the service
	# account signing key; the API server makes its own serving certificate.
	(
		cd "$dir"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 \
			-subj "/CN=kps-check-ca" 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
			-subj "/O=system:masters/CN=kps-check-admin" 2>/dev/null
		openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
			-out admin.crt -days 1 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	)

	setsid "$bin/etcd" --name kps-check --data-dir "$dir/etcd" \
		--listen-client-urls "http://127.0.0.1:$etcd_client" \
		--listen-peer-urls "http://127.0.0.1:$etcd_peer" --unsafe-no-fsync \
		>"$dir/etcd.log" 2>&1 &
	echo $! >"$dir/etcd.pid"
	setsid "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_client" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api" \
		--cert-dir "$dir/certs" --client-ca-file "$dir/ca.crt" \
		--authorization-mode Node,RBAC --service-cluster-ip-range 10.96.0.0/16 \
		--service-account-issuer https://kps-check.invalid \
		--service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
		--endpoint-reconciler-type none --profiling=false \
		>"$dir/kube-apiserver.log" 2>&1 &
	echo $! >"$dir/kube-apiserver.pid"

	cat >"$dir/kubeconfig" <<-KUBECONFIG
		apiVersion: v1
		kind: Config
		clusters:
		  - name: kps-check
		    cluster:
		      server: https://127.0.0.1:$api
		      certificate-authority: $dir/certs/apiserver.crt
		users:
		  - name: admin
		    user: {client-certificate: $dir/admin.crt, client-key: $dir/admin.key}
		contexts:
		  - name: kps-check
		    context: {cluster: kps-check, user: admin}
		current-context: kps-check
	KUBECONFIG

	local i
	for i in $(seq 1 120); do
		if [[ -f "$dir/certs/apiserver.crt" ]] &&
			curl -sf --cacert "$dir/certs/apiserver.crt" --cert "$dir/admin.crt" --key "$dir/admin.key" \
				"https://127.0.0.1:$api/readyz" >/dev/null 2>&1; then
			echo "$dir/kubeconfig"
			return 0
		fi
		if ! kill -0 "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null; then
			log "kube-apiserver exited:"
			tail -n 20 "$dir/kube-apiserver.log" >&2
			stop "$dir"
			exit 1
		fi
		sleep 0.5
	done
	log "kube-apiserver not ready after 60 s:"
	tail -n 20 "$dir/kube-apiserver.log" >&2
	stop "$dir"
	exit 1
}

case "${1:-}" in
start) start "${2:?usage: $0 start DIR}" ;;
stop) stop "${2:?usage: $0 stop DIR}" ;;
*)
	echo "usage: $0 start DIR | stop DIR" >&2
	exit 2
	;;
esac

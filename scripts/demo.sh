#!/usr/bin/env bash
# The README's main job: start a 3-node nodeup cluster on 127.0.0.1 (node i
# offers the custom resource node<i>=2, node 0 also TPU-v3=2), run the
# wordcount job on it, show the cluster, and stop every node it started, also
# when something fails. WORDCOUNT_ARGS passes flags to wordcount.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin/nodeup
BASE_PORT=${NODEUP_DEMO_PORT:-27370}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nodeup-demo.XXXXXX")
export TMPDIR=$WORK # keeps this demo's "current node" pointer away from other nodes
pids=()

cleanup() {
	local rc=$?
	for i in 2 1 0; do
		[ -d "$WORK/n$i" ] && "$BIN" stop --data-dir "$WORK/n$i" --timeout 20s >/dev/null 2>&1 || true
	done
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	if [ $rc -ne 0 ]; then
		echo "demo failed (exit $rc); node logs:" >&2
		tail -n 20 "$WORK"/n*.log >&2 || true
	fi
	rm -rf "$WORK"
	[ $rc -eq 0 ] && echo "==> all nodes stopped"
	exit $rc
}
trap cleanup EXIT INT TERM

start_node() { # name index verb...
	local name=$1 i=$2
	shift 2
	local p=$((BASE_PORT + 10 * i))
	"$BIN" "$@" --bind 127.0.0.1 --port $p --gossip-port $((p + 1)) --http-port $((p + 2)) \
		--data-dir "$WORK/$name" --node-name "$name" --num-cpus 2 --memory 2GiB \
		--resources "node$i=2$EXTRA" >"$WORK/$name.log" 2>&1 &
	pids+=($!)
}

wait_for() { # description command...
	local what=$1
	shift
	for _ in $(seq 1 150); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	echo "timed out waiting for $what" >&2
	return 1
}

HEAD=127.0.0.1:$BASE_PORT
# On the head's machine the CLI and the driver use its Unix socket: the
# TCP port wants TLS and a token.
HEAD_SOCK=unix://$WORK/n0/nodeup.sock
echo "==> starting a 3-node cluster on 127.0.0.1 (ports $BASE_PORT..$((BASE_PORT + 22)))"
EXTRA=",TPU-v3=2" start_node n0 0 start --head
wait_for "the head node" "$BIN" status --address "$HEAD_SOCK" --timeout 2s
# The head made the cluster's CA and printed a join token (also kept,
# mode 0600, in its data dir): the others join with it.
TOKEN_FILE="$WORK/n0/tls/initial-join-token"
EXTRA="" start_node n1 1 join "$HEAD" --token-file "$TOKEN_FILE"
EXTRA="" start_node n2 2 join "$HEAD" --token-file "$TOKEN_FILE"
formed() { # 3 alive nodes and 3 Raft voters
	local js
	js=$("$BIN" status --json --address "$HEAD_SOCK" --timeout 2s) || return 1
	[ "$(grep -c '"State": "alive"' <<<"$js")" = 3 ] && [ "$(grep -c '"Suffrage": "voter"' <<<"$js")" = 3 ]
}
wait_for "3 alive nodes with 3 Raft voters" formed
echo "==> wordcount over the 3 nodes: ${WORDCOUNT_ARGS:-every .go file of the Go standard library}"
NODEUP_ADDRESS=$HEAD_SOCK "$PWD/bin/wordcount" ${WORDCOUNT_ARGS:-}
echo
echo "==> nodeup status over TCP: refused without a token, answered with a read token (TLS)"
if NODEUP_TOKEN= "$BIN" status --address "$HEAD" --timeout 5s >/dev/null 2>"$WORK/refused"; then
	echo "status over TCP without a token was answered" >&2
	exit 1
fi
sed 's/^/    refused: /' "$WORK/refused" | cut -c1-160
READ_TOKEN=$("$BIN" token create --role read --ttl 1h --address "$HEAD_SOCK")
"$BIN" status --address "$HEAD" --token "$READ_TOKEN"
echo
echo "==> stopping the cluster"

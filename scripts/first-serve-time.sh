#!/usr/bin/env bash
# How long a fresh clone takes from `make serve` to a gateway answering /healthz: clones REPO at
# REF into a temp dir, runs `make serve PORT=<free port>` in its own session, polls /healthz, prints
# the seconds, then stops the whole process group and removes the clone.
#
#   scripts/first-serve-time.sh [REPO] [REF]      defaults: this checkout, HEAD
#
# pip runs without its download cache (PIP_NO_CACHE_DIR=1), as on a fresh machine; whatever
# index, mirror or wheel directory pip is configured with is used as it is.
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
ref=${2:-HEAD}
dir=$(mktemp -d /tmp/modelgate-first-serve.XXXXXX)
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
git clone -q "$repo" "$dir/clone"
git -C "$dir/clone" checkout -q "$ref"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start=$(date +%s.%N)
# setsid: make, pip and the server share one new process group that cleanup can end as a whole.
# MODELGATE_SERVER__PORT too, so revisions whose Makefile ignores PORT can be measured the same way.
(cd "$dir/clone" && PIP_NO_CACHE_DIR=1 MODELGATE_SERVER__PORT=$port exec setsid make serve PORT="$port") \
    >"$dir/serve.log" 2>&1 &
pid=$!
until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
        cat "$dir/serve.log" >&2
        echo "make serve exited before the gateway answered" >&2
        exit 1
    fi
    sleep 0.2
done
end=$(date +%s.%N)
printf 'first make serve of %s (%s): %.1f s to /healthz; %s\n' "$repo" \
    "$(git -C "$dir/clone" rev-parse --short HEAD)" "$(echo "$end - $start" | bc)" \
    "$(du -sh "$dir/clone/.venv" | cut -f1) in .venv"

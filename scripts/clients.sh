#!/usr/bin/env bash
# The coding CLIs that tests/clients drives (Claude Code and Codex), from the npm registry.
#
#   scripts/clients.sh paths    install the versions pinned in clients/package-lock.json once per
#                               lock file (cached), then print CLAUDE=<binary> and CODEX=<binary>
#   scripts/clients.sh latest   install the newest published versions into a fresh cache folder
#                               (kept per day), then print the same lines plus their versions
#
# The cache is $MODELGATE_CLIENTS_CACHE (default ~/.cache/modelgate/clients), one folder per lock
# file's hash: the two packages are several hundred MB, so `make test` installs them only when the
# lock file changes. Install scripts are not run (npm ci --ignore-scripts): Claude Code's only copies
# its platform binary into place, and the binary is taken from the platform package directly.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${MODELGATE_CLIENTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelgate/clients}"

log() { echo "clients: $*" >&2; }

ensure_npm() {
    if command -v npm >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        log "npm is not installed and this is not root: install Node.js and npm (Debian: apt-get install nodejs npm)"
        return 1
    fi
    log "installing nodejs and npm from Debian's packages"
    (apt-get -o DPkg::Lock::Timeout=300 update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq nodejs npm) >&2
}

# install DIR: npm ci of clients/package.json + lock into DIR (atomically: a half-done install is
# never taken for a cached one).
install_into() {
    local dir="$1" work
    work="$(mktemp -d "${dir}.partial.XXXXXX")"
    cp clients/package.json clients/package-lock.json "$work/"
    log "installing $(grep -o '"@[^"]*": "[^"]*"' clients/package.json | tr -d '"' | paste -sd ' ') into $dir"
    (cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
    rm -rf "$dir"
    mv "$work" "$dir"
}

# print_paths DIR: the two binaries of an installed folder.
print_paths() {
    local dir="$1" claude
    claude="$(find "$dir/node_modules/@anthropic-ai" -mindepth 2 -maxdepth 2 -type f -name claude \
        -path '*/claude-code-*/claude' | head -n 1)"
    [ -x "$claude" ] || { log "no Claude Code binary for this platform under $dir"; return 1; }
    [ -f "$dir/node_modules/@openai/codex/bin/codex.js" ] || { log "no Codex under $dir"; return 1; }
    echo "CLAUDE=$claude"
    echo "CODEX=$dir/node_modules/@openai/codex/bin/codex.js"
}

# Several test processes (pytest-xdist workers) may ask at once: one installs while the others
# wait on this lock, then find the folder complete. Held until the script exits.
lock_cache() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
}

cmd_paths() {
    ensure_npm
    local hash dir
    hash="$(sha256sum clients/package-lock.json | cut -c1-16)"
    dir="$CACHE/$hash"
    lock_cache
    if [ ! -f "$dir/.complete" ]; then
        install_into "$dir"
        touch "$dir/.complete"
    fi
    print_paths "$dir"
}

cmd_latest() {
    ensure_npm
    local dir="$CACHE/latest-$(date -u +%Y%m%d)" claude codex
    lock_cache
    if [ ! -f "$dir/.complete" ]; then
        local work
        work="$(mktemp -d "${dir}.partial.XXXXXX")"
        (cd "$work" && npm init -y >/dev/null &&
            npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
                @anthropic-ai/claude-code@latest @openai/codex@latest >&2)
        rm -rf "$dir"
        mv "$work" "$dir"
        touch "$dir/.complete"
    fi
    print_paths "$dir"
    claude="$(node -p 'require(process.argv[1]).version' "$dir/node_modules/@anthropic-ai/claude-code/package.json")"
    codex="$(node -p 'require(process.argv[1]).version' "$dir/node_modules/@openai/codex/package.json")"
    echo "VERSIONS=claude-code $claude, codex $codex"
}

case "${1:-}" in
    paths) cmd_paths ;;
    latest) cmd_latest ;;
    *)
        echo "usage: $0 paths|latest" >&2
        exit 2
        ;;
esac

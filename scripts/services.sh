#!/usr/bin/env bash
# Throwaway PostgreSQL and Redis for the test suite, sourced by scripts/test.sh, plus Debian's
# headless Chromium for the dashboard's browser test and Debian's Prometheus for the metrics test
# (exported as MODELGATE_TEST_PROMETHEUS).
#
#   start_services   initdb + pg_ctl on a temp dir and a loopback port, redis-server on another
#                    (start_databases: those two alone), Chromium and Prometheus; exports
#                    MODELGATE_TEST_DATABASE_URL, MODELGATE_TEST_REDIS_URL and
#                    MODELGATE_TEST_REDIS_SERVER (the binary, for tests that stop and restart a Redis)
#   stop_services    stops both and removes the temp dir
#
# Missing binaries are installed from Debian's packages (postgresql, redis-server) when running as
# root, as CI does on a fresh machine. PostgreSQL refuses to run as root, so as root the server runs
# as the unprivileged system user `modelgate-test` (created when absent).
# If both MODELGATE_TEST_* URLs are already set, the services they name are used as they are.

_MG_SVC_DIR=""
_MG_SVC_STARTED_PG=""
_MG_SVC_STARTED_REDIS=""
_MG_SVC_USER=modelgate-test

_mg_svc_log() { echo "services: $*" >&2; }

_mg_svc_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_mg_svc_apt_install() {
    if [ "$(id -u)" != 0 ]; then
        _mg_svc_log "$* is not installed and this is not root: install it (Debian: apt-get install $*)"
        return 1
    fi
    _mg_svc_log "installing $* from Debian's packages"
    # No daemon of the package's own is wanted: policy-rc.d 101 keeps the postinst from starting it.
    local policy=/usr/sbin/policy-rc.d created_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
    fi
    # Another package install may hold the dpkg lock (an unattended upgrade, a parallel job):
    # wait for it up to 5 minutes rather than fail.
    (apt-get -o DPkg::Lock::Timeout=300 update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "$@") >&2
    local rc=$?
    [ -n "$created_policy" ] && rm -f "$policy"
    return $rc
}

_mg_svc_pg_bindir() {
    local candidate
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"
        return 0
    fi
    for candidate in /usr/lib/postgresql/*/bin; do
        if [ -x "$candidate/initdb" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# Run a command as the unprivileged service user when we are root, as ourselves otherwise.
_mg_svc_as_user() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u "$_MG_SVC_USER" -- "$@"
    else
        "$@"
    fi
}

_mg_svc_start_postgres() {
    local bindir port dir="$_MG_SVC_DIR/pg"
    if ! bindir=$(_mg_svc_pg_bindir); then
        _mg_svc_apt_install postgresql || return 1
        bindir=$(_mg_svc_pg_bindir) || { _mg_svc_log "no initdb after installing postgresql"; return 1; }
    fi
    if [ "$(id -u)" = 0 ] && ! id "$_MG_SVC_USER" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$_MG_SVC_USER"
    fi
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown -R "$_MG_SVC_USER" "$_MG_SVC_DIR"
    port=$(_mg_svc_free_port)
    _mg_svc_as_user "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync \
        >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
    # Durability is pointless for a throwaway database; max_connections leaves room for several
    # gateway instances with pools plus the tests' own connections.
    _mg_svc_as_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
-c full_page_writes=off -c max_connections=400" start >/dev/null \
        || { cat "$dir/server.log" >&2; return 1; }
    _MG_SVC_STARTED_PG="$bindir"
    export MODELGATE_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
    _mg_svc_log "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port"
}

_mg_svc_start_redis() {
    local server port dir="$_MG_SVC_DIR/redis"
    if ! server=$(command -v redis-server); then
        _mg_svc_apt_install redis-server || return 1
        server=$(command -v redis-server) || { _mg_svc_log "no redis-server after installing"; return 1; }
    fi
    mkdir -p "$dir"
    port=$(_mg_svc_free_port)
    # Each pytest-xdist worker uses a database number of its own (tests/storage/engines.py).
    "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --databases 64 \
        --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
    local i
    for i in $(seq 100); do
        [ -s "$dir/redis.pid" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.05
    done
    _MG_SVC_STARTED_REDIS="$dir/redis.pid"
    export MODELGATE_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
    export MODELGATE_TEST_REDIS_SERVER="$server"
    _mg_svc_log "Redis $("$server" --version | awk '{print $3}' | sed 's/^v=//') on 127.0.0.1:$port"
}

# The dashboard's browser test drives Debian's headless Chromium (a binary from the package, no
# browser download of a test tool's own).
_mg_svc_ensure_chromium() {
    if command -v chromium-headless-shell >/dev/null 2>&1 || command -v chromium >/dev/null 2>&1; then
        return 0
    fi
    _mg_svc_apt_install chromium-headless-shell || _mg_svc_log "no Chromium: the dashboard browser test cannot run"
}

# The metrics test has a real Prometheus scrape a gateway: Debian's package (its daemon is never
# started; the test runs its own on a loopback port with a temporary configuration).
_mg_svc_ensure_prometheus() {
    if ! command -v prometheus >/dev/null 2>&1; then
        _mg_svc_apt_install prometheus || _mg_svc_log "no Prometheus: the metrics scrape test cannot run"
    fi
    export MODELGATE_TEST_PROMETHEUS="${MODELGATE_TEST_PROMETHEUS:-$(command -v prometheus || true)}"
}

start_services() {
    _mg_svc_ensure_chromium
    _mg_svc_ensure_prometheus
    start_databases
}

# PostgreSQL and Redis only (what `make bench ARGS="--store postgresql"` needs).
start_databases() {
    if [ -n "${MODELGATE_TEST_DATABASE_URL:-}" ] && [ -n "${MODELGATE_TEST_REDIS_URL:-}" ]; then
        _mg_svc_log "using the PostgreSQL and Redis named by MODELGATE_TEST_DATABASE_URL / MODELGATE_TEST_REDIS_URL"
        export MODELGATE_TEST_REDIS_SERVER="${MODELGATE_TEST_REDIS_SERVER:-$(command -v redis-server || true)}"
        return 0
    fi
    _MG_SVC_DIR=$(mktemp -d /tmp/modelgate-services.XXXXXX)
    chmod 755 "$_MG_SVC_DIR"
    _mg_svc_start_postgres || { _mg_svc_log "could not start PostgreSQL"; return 1; }
    _mg_svc_start_redis || { _mg_svc_log "could not start Redis"; return 1; }
}

stop_services() {
    if [ -n "$_MG_SVC_STARTED_PG" ]; then
        _mg_svc_as_user "$_MG_SVC_STARTED_PG/pg_ctl" -D "$_MG_SVC_DIR/pg/data" -m immediate -w stop \
            >/dev/null 2>&1 || true
        _MG_SVC_STARTED_PG=""
    fi
    if [ -n "$_MG_SVC_STARTED_REDIS" ] && [ -s "$_MG_SVC_STARTED_REDIS" ]; then
        local redis_pid tries=0
        redis_pid="$(cat "$_MG_SVC_STARTED_REDIS")"
        kill "$redis_pid" 2>/dev/null || true
        # Redis writes files into the temp dir while it shuts down: wait (up to 5 s) before removing it.
        while kill -0 "$redis_pid" 2>/dev/null && [ "$tries" -lt 50 ]; do
            sleep 0.1
            tries=$((tries + 1))
        done
        _MG_SVC_STARTED_REDIS=""
    fi
    if [ -n "$_MG_SVC_DIR" ]; then
        rm -rf "$_MG_SVC_DIR"
        _MG_SVC_DIR=""
    fi
}

"""The open-file limit and the connection cap that fits in it.

Every client connection holds a descriptor, and so do the upstream connections, the database's
connections and files, the log and the event loop itself. A connection cap above what the limit
leaves for clients lets idle connections take every descriptor: then ``accept`` fails, upstream
connects and database opens fail, and requests already admitted fail with them. So the cap a
process serves with is ``server.max_connections`` or, when that does not fit, the limit minus a
reserve for everything else (``descriptor_reserve``); connections beyond it get a JSON 503 with
``retry-after`` while the requests being served keep working. The start log says which applied.
"""

from __future__ import annotations

import logging
import resource

from modelgate.config import Settings

log = logging.getLogger("modelgate")

#: Descriptors the process needs whatever its traffic: standard streams, the log, the listening
#: socket, the event loop's own, the body workers' pipes, the metrics port, certificates, DNS.
BASE_RESERVE = 64
#: The least cap a process serves with, however low the limit (it would hardly serve below it).
MIN_CAP = 16


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit (each connection holds one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, hard
        soft = hard
    return soft, hard


def descriptor_reserve(settings: Settings) -> int:
    """Descriptors kept for everything but client connections: the base, the database's pool and
    every remote provider's connection pool (``max_concurrency`` each)."""
    upstream = sum(p.max_concurrency for p in settings.providers if p.kind != "simulator")
    return BASE_RESERVE + settings.database_pool_size + upstream


def fitted_connection_cap(settings: Settings, soft_limit: int) -> int:
    if soft_limit == resource.RLIM_INFINITY:
        return settings.server.max_connections
    room = max(MIN_CAP, soft_limit - descriptor_reserve(settings))
    return min(settings.server.max_connections, room)


def fit_connection_cap(settings: Settings) -> Settings:
    """Raise the open-file limit, then ``settings`` with the connection cap that fits it (logged)."""
    soft, hard = raise_open_file_limit()
    cap = fitted_connection_cap(settings, soft)
    configured = settings.server.max_connections
    if cap == configured:
        log.info("open-file limit: %d (hard %d); connection cap %d", soft, hard, cap)
        return settings
    log.warning(
        "open-file limit: %d (hard %d); connection cap %d instead of server.max_connections = %d, "
        "keeping %d descriptors for upstreams, the database and the log; raise the limit "
        "(ulimit -n, LimitNOFILE=) to allow more (docs/operations.md#open-file-limit)",
        soft,
        hard,
        cap,
        configured,
        descriptor_reserve(settings),
    )
    server = settings.server.model_copy(update={"max_connections": cap})
    return settings.model_copy(update={"server": server})

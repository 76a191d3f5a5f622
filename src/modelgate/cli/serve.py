"""``modelgate serve``: first-start bootstrap, then the HTTP server."""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

import typer

from modelgate.cli.bootstrap import (
    BootstrapFileError,
    FirstStart,
    banner,
    base_url,
    first_start,
    first_start_to_file,
)
from modelgate.cli.context import Options, console, fail, with_management
from modelgate.config import ConfigError, Settings
from modelgate.liveconfig.routing import check_routing
from modelgate.management import Management
from modelgate.offload.heap import keep_body_buffers
from modelgate.server.app import create_app
from modelgate.server.reload import ConfigSource
from modelgate.server.runner import serve, tune_garbage_collector
from modelgate.server.supervisor import supervise
from modelgate.telemetry.logs import configure_logging


def _first_start(
    settings: Settings, path: Path | None
) -> Callable[[Management], Awaitable[FirstStart | None]]:
    async def run(m: Management) -> FirstStart | None:
        if path is None:
            return await first_start(m)
        try:
            return await first_start_to_file(m, path, base_url(settings))
        except BootstrapFileError as exc:
            fail(str(exc))

    return run


async def _nothing(m: Management) -> None:
    return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_metrics_public(settings: Settings) -> None:
    """``/metrics`` without a token on an address others can reach shows them traffic and spend."""
    metrics = settings.metrics
    if metrics.enabled and not metrics.token and not is_loopback(settings.server.host):
        logging.getLogger("modelgate").warning(
            "/metrics is public on %s: set metrics.token, or metrics.enabled = false with metrics.port "
            "(docs/operations.md#metrics)",
            settings.server.host,
        )


def port_refusal(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, with the settings that pick another; None when it
    can. Checked before anything is printed or written, so a busy port never looks like a start
    (the server binds again for real a moment later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = "the address is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            return (
                f"cannot listen on {host}:{port}: {reason}. Pick another port with "
                f"`modelgate serve --port {port + 1}` (`make serve PORT={port + 1}`), or server.port in "
                "the config file (MODELGATE_SERVER__PORT); --host / server.host picks the address"
            )
    return None


def serve_command(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Config file (TOML).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Listen port (default 8080).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Data directory (default ./data).")
    ] = None,
    workers: Annotated[
        str | None,
        typer.Option("--workers", help="Serving processes on the port: a number, or 'auto' (one per core)."),
    ] = None,
    no_bootstrap: Annotated[bool, typer.Option("--no-bootstrap", help="Skip first-start demo data.")] = False,
    rotate_secret: Annotated[
        bool,
        typer.Option(
            "--rotate-secret",
            help="Accept a new or changed secret (data/secret or `secret`): every existing key and "
            "admin token stops working. See docs/operations.md#the-secret-file.",
        ),
    ] = False,
    bootstrap_file: Annotated[
        Path | None,
        typer.Option(
            "--bootstrap-file",
            help="Write first-start secrets to this new file (mode 0600) instead of printing them.",
        ),
    ] = None,
) -> None:
    """Run the gateway."""
    # Until the server's reload handler is in place a SIGHUP must not end the start.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    options = Options(config, data_dir)
    server: dict[str, object] = {}
    if host is not None:
        server["host"] = host
    if port is not None:
        server["port"] = port
    if workers is not None:
        server["workers"] = int(workers) if workers.strip().isdigit() else workers.strip()
    settings = options.settings(server=server or None)
    source = ConfigSource(config, {"data_dir": data_dir, "server": server or None})
    refusal = port_refusal(settings.server.host, settings.server.port)
    if refusal is not None:
        fail(refusal)
    request_writer = configure_logging(
        settings.log_level,
        settings.log_format,
        requests=settings.request_log,
        secrets=(settings.metrics.token, settings.secret),
    )
    # Validate the catalogue, deployments and providers before the database is touched: a bad
    # config must not leave a database (nor printed secrets) behind. Then the secret must belong to
    # the database (``secret_file``) before anything uses it; then build everything.
    try:
        check_routing(settings, os.environ)
    except ConfigError as exc:
        fail(str(exc))
    with_management(options, _nothing, rotate_secret=rotate_secret)
    try:
        app = create_app(settings)
    except ConfigError as exc:
        fail(str(exc))
    if request_writer is not None:
        app.services.telemetry.write_request = request_writer
    first = None if no_bootstrap else with_management(options, _first_start(settings, bootstrap_file))
    router = app.services.router
    deployments = {m: [d.provider for d in router.deployments_for(m)] for m in app.services.catalogue.models}
    console.print(
        banner(settings, deployments, first=first, bootstrap_file=bootstrap_file),
        highlight=False,
        soft_wrap=True,
    )
    warn_if_metrics_public(settings)
    if any(p.kind == "simulator" for p in settings.providers):
        logging.getLogger("modelgate").info(
            "the 'simulator' provider is the built-in simulator, not a real model"
        )
    if settings.server.worker_count > 1:
        # A parent that supervises the serving processes; each builds its own gateway.
        raise typer.Exit(supervise(settings, app, source=source))
    tune_garbage_collector()
    keep_body_buffers(settings.server.body_arena_bytes)
    serve(settings, app, source)

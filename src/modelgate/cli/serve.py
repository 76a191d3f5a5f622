"""``modelgate serve``: first-start bootstrap, then the HTTP server."""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import Annotated

import typer

from modelgate.cli.context import Options, console, fail, with_management
from modelgate.config import ConfigError, Settings
from modelgate.management import Management
from modelgate.server.app import create_app
from modelgate.server.runner import serve

DEMO_ACCOUNT = "demo"
DEMO_CREDITS_UC = 100 * 1_000_000


async def bootstrap(m: Management) -> dict[str, str] | None:
    """On an empty database: an operator admin token and a demo account with one key per group."""
    if await m.store.count_admin_tokens() or await m.store.list_accounts():
        return None
    issued = {"admin_token": await m.create_admin_token(None)}
    account = await m.create_account(DEMO_ACCOUNT, DEMO_CREDITS_UC)
    for group in ("Basic", "Pro", "Nova"):
        issued[group] = (await m.create_key(account, group, name=f"demo-{group.lower()}")).secret
    return issued


def _print_bootstrap(issued: dict[str, str], settings: Settings) -> None:
    base = f"http://{settings.server.host}:{settings.server.port}"
    console.print(
        "\n[bold]modelgate first start[/bold]: these secrets are shown ONCE; store them now.\n"
        f"  operator admin token : {issued['admin_token']}\n"
        f"  demo account         : {DEMO_ACCOUNT} ({DEMO_CREDITS_UC // 1_000_000} credits)\n"
        f"  Basic key            : {issued['Basic']}\n"
        f"  Pro key              : {issued['Pro']}\n"
        f"  Nova key             : {issued['Nova']}\n\n"
        "Try it (served by the built-in simulator, not a real model):\n"
        f"  curl -s {base}/v1/messages -H 'x-api-key: {issued['Basic']}' \\\n"
        "    -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \\\n"
        '    -d \'{"model":"aria-sonnet-4.6","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}\'\n',
        highlight=False,
        soft_wrap=True,
    )


def tune_garbage_collector() -> None:
    """Keep the cycle collector off the request path.

    Everything loaded at start (modules, the catalogue, pydantic models, clients) lives as long
    as the process; ``gc.freeze`` moves it out of the collector's generations, so a full
    collection no longer walks tens of megabytes of objects that can never be garbage (such a
    walk was a periodic multi-millisecond stall). Request objects are freed by reference counting;
    the collector runs less often for the few cycles they leave (asyncio exceptions, tracebacks).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def serve_command(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Config file (TOML).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Listen port (default 8080).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Data directory (default ./data).")
    ] = None,
    no_bootstrap: Annotated[bool, typer.Option("--no-bootstrap", help="Skip first-start demo data.")] = False,
) -> None:
    """Run the gateway."""
    options = Options(config, data_dir)
    server: dict[str, object] = {}
    if host is not None:
        server["host"] = host
    if port is not None:
        server["port"] = port
    settings = options.settings(server=server or None)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Build (and so validate) everything before the first-start bootstrap: a bad config must not
    # leave a seeded database and printed secrets behind.
    try:
        app = create_app(settings)
    except ConfigError as exc:
        fail(str(exc))
    if not no_bootstrap:
        issued = with_management(options, bootstrap)
        if issued:
            _print_bootstrap(issued, settings)
    tune_garbage_collector()
    if any(p.kind == "simulator" for p in settings.providers):
        logging.getLogger("modelgate").info(
            "the 'simulator' provider is the built-in simulator, not a real model"
        )
    serve(settings, app)

"""What every CLI command needs: settings from the same sources as the server, the narrow
repositories of the configured database, and output as a human table or as JSON (``--json``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import orjson
import typer
from rich.console import Console
from rich.table import Table

from modelgate.catalogue import build_catalogue
from modelgate.clock import SystemClock
from modelgate.config import ConfigError, Settings, load_settings
from modelgate.keys import Digester
from modelgate.management import Management, ManagementError
from modelgate.secret_file import checked_secret
from modelgate.storage import StorageError, open_store
from modelgate.storage.base import UsageStore
from modelgate.storage.file_probe import refuse_a_new_database_beside_a_deleted_one
from modelgate.storage.people import PeopleStore
from modelgate.storage.responses import ResponseStore

T = TypeVar("T")
console = Console()
err_console = Console(stderr=True)

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Config file (TOML); or MODELGATE_CONFIG.")
]
DataDirOpt = Annotated[
    Path | None, typer.Option("--data-dir", help="Data directory (SQLite database, secret).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


def when(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@dataclass
class Options:
    config: Path | None = None
    data_dir: Path | None = None
    json: bool = False

    def settings(self, **overrides: Any) -> Settings:
        try:
            return load_settings(self.config, data_dir=self.data_dir, **overrides)
        except ConfigError as exc:
            fail(str(exc))


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


@dataclass(frozen=True, slots=True)
class Repositories:
    """What the CLI reads beyond ``Management`` (which holds the accounts, keys and admin tokens):
    each repository as its narrow protocol, never the whole database."""

    usage: UsageStore
    responses: ResponseStore
    people: PeopleStore


def with_repositories(
    options: Options,
    work: Callable[[Management, Repositories], Awaitable[T]],
    *,
    rotate_secret: bool = False,
) -> T:
    """Run ``work`` against the configured database (usable while the server runs), once the
    secret is known to belong to it (``secret_file.checked_secret``)."""
    settings = options.settings()

    async def run() -> T:
        refuse_a_new_database_beside_a_deleted_one(settings.resolved_database_url)
        store = open_store(settings.resolved_database_url, pool_size=settings.database_pool_size)
        try:
            await store.database.migrate()
            clock = SystemClock()
            secret = await checked_secret(store.tokens, settings, clock.time(), rotate=rotate_secret)
            management = Management(
                store.accounts,
                store.keys,
                store.tokens,
                build_catalogue(settings.catalogue),
                Digester(secret),
                clock,
                settings.keys.default_rpm,
            )
            return await work(management, Repositories(store.usage, store.responses, store.people))
        finally:
            await store.database.close()

    try:
        return run_async(run())
    except ManagementError as exc:
        fail(str(exc))
    except StorageError as exc:
        fail(f"database: {exc}")
    except ConfigError as exc:  # the secret does not belong to the database, or cannot be read
        fail(str(exc))


def with_management(
    options: Options, work: Callable[[Management], Awaitable[T]], *, rotate_secret: bool = False
) -> T:
    """``with_repositories`` for a command that needs only ``Management``."""

    async def managed(management: Management, _: Repositories) -> T:
        return await work(management)

    return with_repositories(options, managed, rotate_secret=rotate_secret)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


#: Terminal width from which ``emit`` adds its ``wide`` columns.
WIDE_TERMINAL = 120


def emit(
    options: Options,
    rows: list[dict[str, Any]],
    columns: list[str],
    title: str | None = None,
    *,
    whole: tuple[str, ...] = ("id",),
    wide: tuple[str, ...] = (),
) -> None:
    """A table (``--json``: the rows as JSON). Columns in ``whole`` are never wrapped or cut: ids
    are what the next command needs, so they stay copyable in an 80-column terminal; the others
    fold. ``wide`` columns are shown only from ``WIDE_TERMINAL`` columns on (``--json`` has all)."""
    if options.json:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    shown = columns + [c for c in wide if console.width >= WIDE_TERMINAL]
    table = Table(title=title, box=None, pad_edge=False, padding=(0, 1), header_style="bold underline")
    for column in shown:
        table.add_column(column, no_wrap=column in whole, overflow="fold")
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in shown))
    console.print(table)


def emit_one(options: Options, data: dict[str, Any], message: str) -> None:
    if options.json:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        console.print(message, highlight=False)

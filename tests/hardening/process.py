"""``modelgate serve`` as a real process (its own session, so a test can signal or kill its whole
process group), seeded with an account and keys through the management API on its database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from modelgate.cli.context import Options, with_management
from modelgate.management import Management
from tests.gateway_server import free_port
from tests.secret_scan import SCANNER

SECRET = "process-test-secret-" + "y" * 40
SCANNER.register(SECRET)


@dataclass
class Seeded:
    account_id: int
    keys: dict[str, str] = field(default_factory=dict)


def write_config(path: Path, port: int, extra: str = "", top: str = "", **sections: dict[str, Any]) -> None:
    """A config file: the port, a fixed secret, ``top`` (top-level TOML lines), flat
    ``sections``, then ``extra`` TOML (arrays of tables such as providers and deployments)."""
    lines = [f'secret = "{SECRET}"', 'log_level = "warning"', top, ""]
    merged: dict[str, dict[str, Any]] = {"server": {"host": "127.0.0.1", "port": port}}
    for name, values in sections.items():
        merged.setdefault(name, {}).update(values)
    for name, values in merged.items():
        lines.append(f"[{name}]")
        for key, value in values.items():
            rendered = (
                f'"{value}"'
                if isinstance(value, str)
                else str(value).lower()
                if isinstance(value, bool)
                else value
            )
            lines.append(f"{key} = {rendered}")
        lines.append("")
    path.write_text("\n".join(lines) + "\n" + extra)


class GatewayProcess:
    def __init__(
        self,
        root: Path,
        extra: str = "",
        top: str = "",
        *,
        stderr_apart: bool = False,
        **sections: dict[str, Any],
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.data_dir = root / "data"
        self.config = root / "modelgate.toml"
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        write_config(self.config, self.port, extra, top, **sections)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "gateway.log"
        #: With ``stderr_apart``: the logs alone (stderr), the start banner staying in ``log``.
        self.stderr = root / "gateway.stderr" if stderr_apart else self.log

    def seed(self, credits: int = 1_000, groups: tuple[str, ...] = ("Basic", "Nova")) -> Seeded:
        async def work(m: Management) -> Seeded:
            account = await m.create_account("load", credits * 1_000_000)
            seeded = Seeded(account.id)
            for group in groups:
                seeded.keys[group] = (await m.create_key(account, group, rpm=1_000_000)).secret
            return seeded

        return with_management(Options(self.config, self.data_dir), work)

    def operator_headers(self) -> dict[str, str]:
        """An operator admin token's header (issued in the database): /health's details need one."""

        async def issue(m: Management) -> str:
            return str(await m.create_admin_token(None))

        return {"authorization": f"Bearer {with_management(Options(self.config, self.data_dir), issue)}"}

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "modelgate", "serve", "--config", str(self.config)]
        return [*command, "--data-dir", str(self.data_dir), "--no-bootstrap"]

    def start(self) -> GatewayProcess:
        # The child writes through its own copies of the descriptors.
        with self.log.open("ab") as log, self.stderr.open("ab") as err:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=err, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited at start: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError("gateway did not start")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole process group (the server and any body worker it started)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def __enter__(self) -> GatewayProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        elif self.proc is not None:
            # The server exited; a body worker of its group may linger only if the server died.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        for written in {self.log, self.stderr}:  # everything it logged, checked for secrets
            if written.exists():
                SCANNER.scan(
                    written.read_text(errors="replace"), f"log of modelgate serve on port {self.port}"
                )

    # the database, read directly once the process is gone or alongside it --------------------

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.data_dir / "modelgate.db")

    def ledger(self, account_id: int) -> dict[str, int]:
        with self.db() as db:
            balance, reserved = db.execute(
                "SELECT balance_uc, reserved_uc FROM accounts WHERE id = ?", (account_id,)
            ).fetchone()
            topups = db.execute(
                "SELECT COALESCE(SUM(amount_uc), 0) FROM topups WHERE account_id = ?", (account_id,)
            ).fetchone()[0]
            charged, records = db.execute(
                "SELECT COALESCE(SUM(charged_uc), 0), COUNT(*) FROM usage_records WHERE account_id = ?",
                (account_id,),
            ).fetchone()
            held, pending = db.execute(
                "SELECT COALESCE(SUM(amount_uc), 0), COUNT(*) FROM reservations WHERE account_id = ?",
                (account_id,),
            ).fetchone()
        return {
            "balance": balance,
            "reserved": reserved,
            "topups": topups,
            "charged": charged,
            "records": records,
            "held": held,
            "pending": pending,
        }

    def statuses(self) -> dict[str, int]:
        with self.db() as db:
            rows = db.execute("SELECT status, COUNT(*) FROM usage_records GROUP BY status").fetchall()
        return {status: count for status, count in rows}


def assert_ledger_invariant(ledger: dict[str, int]) -> None:
    """Money adds up exactly: balance = top-ups - charges, holds = the pending reservations."""
    assert ledger["balance"] == ledger["topups"] - ledger["charged"], ledger
    assert ledger["reserved"] == ledger["held"], ledger
    assert ledger["balance"] >= ledger["reserved"] >= 0, ledger


def run(coro: Any) -> Any:
    return asyncio.run(coro)

"""The gateway refuses to run on the wrong state (issue #28 item 4): a missing, changed or empty
secret file with keys in the database stops the start with a message naming the file and what to
do, never a traceback; a SQLite file deleted or replaced under a running server, or a full disk,
turns ``/health`` to 503 with the reason and refuses requests in their wire format; the CLI does
not create an empty database where a running server's was deleted. Real ``modelgate serve``
processes and CLI commands."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.hardening.process import SECRET, GatewayProcess, Seeded

CHAT = {"model": "nova-5.5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "aria-haiku-4.5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
OTHER_SECRET = "another-secret-entirely-" + "z" * 40


class FileSecretGateway(GatewayProcess):
    """A gateway whose HMAC secret is the file ``data/secret`` (no ``secret`` in the config)."""

    def __init__(self, root: Path, **sections: dict[str, object]) -> None:
        super().__init__(root, **sections)  # type: ignore[arg-type]
        self.config.write_text(self.config.read_text().replace(f'secret = "{SECRET}"\n', ""))
        self.secret_file = self.data_dir / "secret"

    def run_cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "modelgate", *args, "--config", str(self.config)]
        return subprocess.run(
            [*command, "--data-dir", str(self.data_dir)], capture_output=True, text=True, timeout=timeout
        )

    def serve_refused(self, *flags: str) -> str:
        """Run ``modelgate serve``, which must exit by itself with an error; its stderr."""
        command = [*self.command(), *flags]
        # Wide enough that rich never folds a path (tmp_path is longer under pytest-xdist).
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "COLUMNS": "1000"},
        )
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError("modelgate serve started instead of refusing") from None
        assert proc.returncode != 0, out
        text = " ".join(err.decode().split())  # rich wraps long lines
        assert "Traceback" not in text, text
        return text


def chat(gateway: GatewayProcess, keys: dict[str, str]) -> httpx.Response:
    headers = {"authorization": f"Bearer {keys['Nova']}"}
    return httpx.post(f"{gateway.base_url}/v1/chat/completions", json=CHAT, headers=headers, timeout=30)


def messages(gateway: GatewayProcess, keys: dict[str, str]) -> httpx.Response:
    headers = {"x-api-key": keys["Basic"], "anthropic-version": "2023-06-01"}
    return httpx.post(f"{gateway.base_url}/v1/messages", json=MESSAGES, headers=headers, timeout=30)


def seeded_gateway(tmp_path: Path) -> tuple[FileSecretGateway, Seeded]:
    gateway = FileSecretGateway(tmp_path)
    seeded = gateway.seed()
    assert gateway.secret_file.exists()
    return gateway, seeded


def test_a_missing_secret_file_stops_the_start_until_restored_or_rotated(tmp_path: Path) -> None:
    gateway, seeded = seeded_gateway(tmp_path)
    with gateway:
        kept = gateway.secret_file.read_bytes()
        gateway.secret_file.unlink()
        refusal = gateway.serve_refused()
        assert f"the secret file {gateway.secret_file} is missing" in refusal, refusal
        assert "restore" in refusal and "--rotate-secret" in refusal
        assert not gateway.secret_file.exists()  # not silently recreated
        # The CLI refuses the same way (it would digest new keys under a new secret).
        listed = gateway.run_cli("keys", "list")
        assert listed.returncode != 0 and "is missing" in " ".join(listed.stderr.split())
        assert not gateway.secret_file.exists()
        # Restored: the gateway starts and the keys work.
        gateway.secret_file.write_bytes(kept)
        gateway.start()
        assert chat(gateway, seeded.keys).status_code == 200


def test_rotating_the_secret_is_explicit_and_old_keys_stop(tmp_path: Path) -> None:
    gateway, seeded = seeded_gateway(tmp_path)
    with gateway:
        gateway.secret_file.unlink()
        command = gateway.command

        def rotating() -> list[str]:
            return [*command(), "--rotate-secret"]

        gateway.command = rotating  # type: ignore[method-assign]
        gateway.start()
        assert gateway.secret_file.exists()
        assert chat(gateway, seeded.keys).status_code == 401
        assert (
            "secret was rotated" in gateway.log.read_text()
            or "generated a new secret" in gateway.log.read_text()
        )


def test_a_changed_secret_file_stops_the_start(tmp_path: Path) -> None:
    gateway, _ = seeded_gateway(tmp_path)
    with gateway:
        gateway.secret_file.write_text(OTHER_SECRET)
        refusal = gateway.serve_refused()
        assert f"{gateway.secret_file} is not the secret this database's keys" in refusal, refusal
        assert OTHER_SECRET not in refusal


def test_a_missing_secret_is_caught_on_a_database_from_before_fingerprints(tmp_path: Path) -> None:
    gateway, _ = seeded_gateway(tmp_path)
    with gateway:
        with sqlite3.connect(gateway.data_dir / "modelgate.db") as db:
            db.execute("DELETE FROM secret_fingerprint")
        gateway.secret_file.unlink()
        assert "is missing" in gateway.serve_refused()


@pytest.mark.parametrize("content", ["", "\n", "short"])
def test_an_empty_or_short_secret_file_stops_the_start_without_a_traceback(
    tmp_path: Path, content: str
) -> None:
    gateway = FileSecretGateway(tmp_path)
    with gateway:
        gateway.data_dir.mkdir(parents=True)
        gateway.secret_file.write_text(content)
        refusal = gateway.serve_refused()
        assert f"the secret file {gateway.secret_file}" in refusal, refusal
        assert ("is empty" if not content.strip() else "fewer than 32") in refusal


def test_a_database_deleted_under_the_server_is_reported_and_refuses_writes(tmp_path: Path) -> None:
    gateway, seeded = seeded_gateway(tmp_path)
    with gateway:
        operator = gateway.operator_headers()
        gateway.start()
        assert chat(gateway, seeded.keys).status_code == 200
        database = gateway.data_dir / "modelgate.db"
        database.unlink()
        public = httpx.get(f"{gateway.base_url}/health", timeout=30)
        assert public.json()["components"]["database"] == "down"
        # Public: never the file's path nor where its data can be read (the operator's view and
        # the log have them).
        assert str(gateway.data_dir) not in public.text and "/fd/" not in public.text, public.text
        health = httpx.get(f"{gateway.base_url}/health", headers=operator, timeout=30)
        assert health.status_code == 503
        checked = health.json()["checks"]["database"]
        assert checked["status"] == "unavailable" and "was deleted" in checked["reason"], checked
        assert "was deleted" in gateway.stderr.read_text() and "/fd/" in gateway.stderr.read_text()
        refused = chat(gateway, seeded.keys)
        assert refused.status_code == 503 and "type" not in refused.json(), refused.text
        refused = messages(gateway, seeded.keys)
        assert refused.status_code in (503, 529) and refused.json()["type"] == "error", refused.text
        # The CLI does not create an empty database where the server's was deleted.
        listed = gateway.run_cli("accounts", "list")
        assert listed.returncode != 0 and "still has it open" in " ".join(listed.stderr.split())
        assert not database.exists()
    # Once the server is gone, a new database beside the old secret is said to be new, once.
    listed = gateway.run_cli("accounts", "list")
    assert listed.returncode == 0 and "is new but the secret file" in " ".join(listed.stderr.split())
    assert "is new" not in gateway.run_cli("accounts", "list").stderr


def test_a_database_deleted_before_any_write_is_reported_and_stays_reported(tmp_path: Path) -> None:
    gateway, seeded = seeded_gateway(tmp_path)
    with gateway:
        operator = gateway.operator_headers()
        gateway.start()
        database = gateway.data_dir / "modelgate.db"
        database.unlink()  # before the server wrote anything
        health = httpx.get(f"{gateway.base_url}/health", headers=operator, timeout=30)
        assert health.status_code == 503, health.text
        assert "was deleted" in health.json()["checks"]["database"]["reason"]
        assert chat(gateway, seeded.keys).status_code == 503
        # A file put back at the path is not the one the server writes: still refused until
        # the restart (reported as deleted, not as replaced), and the problem was logged once.
        database.write_bytes(b"")
        health = httpx.get(f"{gateway.base_url}/health", headers=operator, timeout=30)
        assert health.status_code == 503 and "was deleted" in health.json()["checks"]["database"]["reason"]
        found = [
            line
            for line in gateway.stderr.read_text().splitlines()
            if '"logger":"modelgate.storage"' in line and "was deleted while the gateway had it open" in line
        ]
        assert len(found) == 1, found


def test_a_database_replaced_under_the_server_is_reported(tmp_path: Path) -> None:
    gateway, seeded = seeded_gateway(tmp_path)
    with gateway:
        operator = gateway.operator_headers()
        gateway.start()
        database = gateway.data_dir / "modelgate.db"
        copy = tmp_path / "copy.db"
        with sqlite3.connect(database) as source, sqlite3.connect(copy) as target:
            source.backup(target)
        shutil.move(copy, database)
        assert str(gateway.data_dir) not in httpx.get(f"{gateway.base_url}/health", timeout=30).text
        health = httpx.get(f"{gateway.base_url}/health", headers=operator, timeout=30)
        assert health.status_code == 503 and "was replaced" in health.json()["checks"]["database"]["reason"]
        assert "was replaced" in gateway.stderr.read_text()
        assert chat(gateway, seeded.keys).status_code == 503


def test_a_full_disk_is_reported_and_new_requests_are_refused_in_their_format(tmp_path: Path) -> None:
    gateway = FileSecretGateway(tmp_path)
    gateway.config.write_text(
        gateway.config.read_text().replace("[server]", f"database_min_free_bytes = {10**18}\n\n[server]", 1)
    )
    with gateway:
        seeded = gateway.seed()
        operator = gateway.operator_headers()
        gateway.start()
        health = httpx.get(f"{gateway.base_url}/health", headers=operator, timeout=30)
        assert health.status_code == 503
        assert "is full" in health.json()["checks"]["database"]["reason"]
        refused = chat(gateway, seeded.keys)
        assert refused.status_code == 503 and "type" not in refused.json(), refused.text
        assert messages(gateway, seeded.keys).json()["type"] == "error"
        assert gateway.ledger(seeded.account_id)["records"] == 0

"""Key changes reach every worker of one instance within a second (no Redis: each worker's key
view polls the shared database), and a rotated secret's grace ends on every worker at once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from modelgate.cli.context import Options, with_management
from modelgate.management import Management
from tests.workers.harness import WorkersGateway


def accepted_on_each(gateway: WorkersGateway, secret: str) -> dict[int, bool]:
    def ask(client: httpx.Client) -> bool:
        response = client.get("/v1/models", headers={"authorization": f"Bearer {secret}"})
        assert response.status_code in (200, 401), response.text
        return response.status_code == 200

    return gateway.on_each_worker(ask)


def seconds_until_refused_everywhere(gateway: WorkersGateway, secret: str, started: float) -> float:
    refused: set[int] = set()
    while len(refused) < gateway.workers:
        assert time.monotonic() - started < 5, f"still accepted on workers other than {refused}"
        refused |= {w for w, ok in accepted_on_each(gateway, secret).items() if not ok}
    return time.monotonic() - started


def test_revocation_through_one_worker_or_the_cli_is_refused_by_every_worker_within_a_second(
    tmp_path: Path,
) -> None:
    with WorkersGateway(tmp_path) as gateway:
        options = Options(gateway.config, gateway.data_dir)

        async def setup(m: Management) -> dict[str, Any]:
            account = await m.create_account("acme", 10_000_000)
            keys = {name: await m.create_key(account, "Basic") for name in ("api", "cli", "bystander")}
            return {"token": await m.create_admin_token(None), **keys}

        made = with_management(options, setup)
        gateway.start()
        for name in ("api", "cli", "bystander"):
            assert all(accepted_on_each(gateway, made[name].secret).values())

        # Through the admin API: whichever worker takes it applies it at once, the other polls.
        started = time.monotonic()
        response = httpx.post(
            f"{gateway.base_url}/admin/api/keys/{made['api'].record.id}/revoke",
            json={},
            headers={"authorization": f"Bearer {made['token']}"},
        )
        assert response.status_code == 200, response.text
        elapsed = seconds_until_refused_everywhere(gateway, made["api"].secret, started)
        assert elapsed <= 1.0, f"revocation took {elapsed:.3f} s to reach every worker"

        # Through the CLI's code path (another process writing the database).
        async def revoke(m: Management) -> None:
            await m.revoke_key(await m.key(made["cli"].record.id))

        with_management(options, revoke)
        elapsed = seconds_until_refused_everywhere(gateway, made["cli"].secret, time.monotonic())
        assert elapsed <= 1.0, f"revocation took {elapsed:.3f} s to reach every worker"
        assert all(accepted_on_each(gateway, made["bystander"].secret).values())  # others untouched


def test_rotation_grace_is_honoured_on_every_worker(tmp_path: Path) -> None:
    with WorkersGateway(tmp_path, clocked=True) as gateway:
        options = Options(gateway.config, gateway.data_dir)
        assert gateway.clock is not None

        async def setup(m: Management) -> Any:
            return await m.create_key(await m.create_account("acme", 10_000_000), "Pro")

        issued = with_management(options, setup)
        gateway.start()

        async def rotate(m: Management, grace: float) -> str:
            return (await m.rotate_key(await m.key(issued.record.id), grace)).secret

        gateway.clock.set(time.time())  # management stamps the rotation with the real time
        started = time.monotonic()
        new = with_management(options, lambda m: rotate(m, 600))
        while not all(accepted_on_each(gateway, new).values()):
            assert time.monotonic() - started < 1.0, "the new secret did not reach every worker within 1 s"
        assert all(accepted_on_each(gateway, issued.secret).values())  # the old one, within its grace
        gateway.clock.set(time.time() + 601)  # every worker's clock passes the end of the grace
        assert not any(accepted_on_each(gateway, issued.secret).values())
        assert all(accepted_on_each(gateway, new).values())

        # Without grace the previous secret stops on every worker within a second.
        started = time.monotonic()
        newest = with_management(options, lambda m: rotate(m, 0))
        assert seconds_until_refused_everywhere(gateway, new, started) <= 1.0
        assert all(accepted_on_each(gateway, newest).values())

"""Key changes reach every worker of one instance (no Redis: each worker's key view polls the shared
database), and a rotated secret's grace ends on every worker at once.

How soon a change is honoured is a speed, measured by ``make bench --keys`` (docs/bench.md); these
tests assert that it is honoured by every worker, with a generous guard against a change that
never arrives."""

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


#: A change that has not reached every worker after this long never will (a poll runs every 0.25 s).
NEVER_SECONDS = 20.0


def refused_everywhere(gateway: WorkersGateway, secret: str) -> None:
    """Wait until every worker refuses ``secret``; once one refuses it, it must keep refusing."""
    started = time.monotonic()
    refused: set[int] = set()
    while len(refused) < gateway.workers:
        assert time.monotonic() - started < NEVER_SECONDS, f"still accepted on workers other than {refused}"
        now_refused = {w for w, ok in accepted_on_each(gateway, secret).items() if not ok}
        assert refused <= now_refused, (
            f"a worker accepted again a key it had refused ({refused - now_refused})"
        )
        refused = now_refused


def test_revocation_through_one_worker_or_the_cli_is_refused_by_every_worker(
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
        response = httpx.post(
            f"{gateway.base_url}/admin/api/keys/{made['api'].record.id}/revoke",
            json={},
            headers={"authorization": f"Bearer {made['token']}"},
        )
        assert response.status_code == 200, response.text
        refused_everywhere(gateway, made["api"].secret)

        # Through the CLI's code path (another process writing the database).
        async def revoke(m: Management) -> None:
            await m.revoke_key(await m.key(made["cli"].record.id))

        with_management(options, revoke)
        refused_everywhere(gateway, made["cli"].secret)
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
            assert time.monotonic() - started < NEVER_SECONDS, "the new secret never reached every worker"
        assert all(accepted_on_each(gateway, issued.secret).values())  # the old one, within its grace
        gateway.clock.set(time.time() + 601)  # every worker's clock passes the end of the grace
        assert not any(accepted_on_each(gateway, issued.secret).values())
        assert all(accepted_on_each(gateway, new).values())

        # Without grace the previous secret stops on every worker.
        newest = with_management(options, lambda m: rotate(m, 0))
        refused_everywhere(gateway, new)
        assert all(accepted_on_each(gateway, newest).values())

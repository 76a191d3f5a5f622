"""A month of realistic traffic through a real gateway, for the dashboard's browser tests, the usage
log API tests and the screenshots in docs/ (``tests/admin/screenshots.py``).

Requests go over HTTP to the gateway (simulator upstream) while a ``ManualClock`` walks through the
days, so usage records, month spend, rotations and revocations are all made the way production
makes them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from modelgate.management import IssuedKey, IssuedToken
from modelgate.storage.base import Account
from tests.gateway_server import GatewayServer, ManualClock

#: The seeded month starts here; the clock ends on the 21st, inside the same month.
MONTH_START = datetime(2026, 11, 1, 8, 0, tzinfo=UTC).timestamp()
MONTH = "2026-11"
DAYS = 20
_names = itertools.count(1)


@dataclass
class SeededAccount:
    account: Account
    owner: IssuedToken
    keys: dict[str, IssuedKey] = field(default_factory=dict)
    #: request count per key name
    requests: dict[str, int] = field(default_factory=dict)


@dataclass
class Seeded:
    operator: str
    acme: SeededAccount
    globex: SeededAccount

    @property
    def accounts(self) -> list[SeededAccount]:
        return [self.acme, self.globex]


def _send(client: httpx.Client, key: IssuedKey, model: str, words: int) -> None:
    prompt = " ".join(["tell me about the gateway"] * words)
    if key.record.group == "Nova" and words % 2:
        response = client.post(
            "/v1/responses",
            headers={"authorization": f"Bearer {key.secret}"},
            json={"model": model, "input": prompt, "max_output_tokens": 400},
        )
    elif key.record.group != "Nova" and words % 3 == 0:
        response = client.post(
            "/v1/messages",
            headers={"x-api-key": key.secret, "anthropic-version": "2023-06-01"},
            json={"model": model, "max_tokens": 400, "messages": [{"role": "user", "content": prompt}]},
        )
    else:
        response = client.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {key.secret}"},
            json={"model": model, "max_tokens": 400, "messages": [{"role": "user", "content": prompt}]},
        )
    assert response.status_code == 200, response.text


def seed(gateway: GatewayServer, clock: ManualClock, *, days: int = DAYS) -> Seeded:
    """Two accounts with keys and owner tokens, and ``days`` days of traffic from the 1st of
    ``MONTH``; leaves the clock on the morning after the last day."""
    clock.set(MONTH_START)
    m = gateway.management
    suffix = next(_names)
    seeded: list[SeededAccount] = []
    for name, credits in (("acme", 400), ("globex", 150)):
        account = gateway.account(f"{name}-{suffix}" if suffix > 1 else name, credits)
        owner = gateway.call(m.issue_admin_token(account, name=f"{name} owner"))
        seeded.append(SeededAccount(account, owner))
    acme, globex = seeded
    acme.keys["ci-pipeline"] = gateway.key(acme.account, "Pro", name="ci-pipeline", monthly_cap_uc=60_000_000)
    acme.keys["notebook"] = gateway.key(
        acme.account, "Basic", name="notebook", rpm=30, models=["haiku"], monthly_cap_uc=5_000_000
    )
    acme.keys["agents"] = gateway.key(acme.account, "Nova", name="agents", monthly_cap_uc=80_000_000)
    globex.keys["prod"] = gateway.key(globex.account, "Pro", name="prod")
    plan = [
        (acme, "ci-pipeline", ["aria-sonnet-4.6", "aria-opus-4.8", "aria-haiku-4.5"]),
        (acme, "notebook", ["aria-haiku-4.5"]),
        (acme, "agents", ["nova-5.5", "nova-6-sol"]),
        (globex, "prod", ["aria-sonnet-4.6", "aria-haiku-4.5"]),
    ]
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        for day in range(days):
            clock.set(MONTH_START + day * 86_400)
            for owner_account, key_name, models in plan:
                # A weekly rhythm with a mid-month peak, so the charts have a shape.
                count = 1 + (day % 7 < 5) + (8 <= day <= 13) + (key_name == "ci-pipeline")
                for n in range(count):
                    clock.advance(300)
                    model = models[(day + n) % len(models)]
                    _send(client, owner_account.keys[key_name], model, 2 + (day * 3 + n) % 9)
                    owner_account.requests[key_name] = owner_account.requests.get(key_name, 0) + 1
    clock.set(MONTH_START + days * 86_400 + 3_600)
    # Caps that the month's spend fills to different degrees, so the cap bars say something.
    for key_name, share in (("ci-pipeline", 0.55), ("notebook", 0.9), ("agents", 0.3)):
        record = acme.keys[key_name].record
        spent, _ = gateway.call(gateway.services.ledger_store.month_spend(record.id, MONTH))
        gateway.call(m.update_key(record, monthly_cap_uc=max(1, round(spent / share))))
    # A rotation whose old secret still works for a day, and a retired key.
    rotated = gateway.call(m.rotate_key(acme.keys["ci-pipeline"].record, 86_400))
    acme.keys["ci-pipeline"] = rotated
    retired = gateway.key(acme.account, "Basic", name="old-laptop")
    gateway.call(m.revoke_key(retired.record))
    acme.keys["old-laptop"] = retired
    gateway.refresh_keys()
    operator = gateway.call(m.issue_admin_token(None, name="operator console"))
    return Seeded(operator.secret, acme, globex)

"""Hostile ``If-None-Match`` values on the usage reports (admin.conditional): every answer is the
whole report (200), a 304 only when the value really names the caller's current tag (or is
``*``), or a 4xx in the admin API's error shape; never a 5xx, and nothing is charged. Seeded:
``MODELGATE_TEST_FUZZ_SEED`` reproduces a run."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import httpx
import pytest

from modelgate.admin.conditional import MAX_IF_NONE_MATCH, matches
from tests.admin.conftest import Admin, Tenant
from tests.gateway_server import running_gateway

SEED = int(os.environ.get("MODELGATE_TEST_FUZZ_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)
COUNT = 600
PATHS = (
    "/usage",
    "/usage?limit=0",
    "/usage/daily",
    "/usage/top-keys?limit=8",
    "/usage/records",
    "/usage/records?limit=3",
    "/usage?month=2026-13",
    "/usage/daily?account_id=987654321",
)
PIECES = [
    "*",
    "W/",
    '"',
    ",",
    " ",
    "\t",
    "W/*",
    '""',
    "W/W/",
    '"*"',
    "\\",
    "'",
    "é",
    "\xff",
    "\x80",
    "%22",
    "x",
]


def _hostile(rng: random.Random, tags: list[str]) -> bytes:
    """An ``If-None-Match`` value: real tags broken or padded, junk, lists, very long ones."""
    roll = rng.randrange(8)
    if roll == 0:
        value = rng.choice(tags)
    elif roll == 1:  # a real tag broken one way
        tag = rng.choice(tags)
        cut = rng.randrange(len(tag))
        value = rng.choice([tag[:cut], tag[cut:], tag.upper(), tag.replace('"', "'"), tag + tag, f"W/ {tag}"])
    elif roll == 2:
        value = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40)))
    elif roll == 3:  # a long list with a real tag somewhere in it, or past the length read
        items = [f'"{rng.getrandbits(64):x}"' for _ in range(rng.randint(1, 400))]
        items.insert(rng.randrange(len(items) + 1), rng.choice(tags))
        value = ", ".join(items)
    elif roll == 4:
        value = rng.choice(
            ["", " ", ",", ",,,,", "*, *", "W/", '"', "*" * 5000, "," * (MAX_IF_NONE_MATCH + 1)]
        )
    elif roll == 5:  # printable junk of any length
        value = "".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(rng.choice([1, 10, 300, 4096, 9000])))
    elif roll == 6:  # bytes above ASCII (obs-text: allowed in a header, read as Latin-1)
        return bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randint(1, 200)))
    else:
        value = f"W/{rng.choice(tags)}, *" if rng.random() < 0.5 else f"{rng.choice(tags)}\t"
    return value.strip(" \t").encode("latin-1")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Admin, Tenant, Tenant]]:
    with running_gateway(tmp_path_factory.mktemp("etag-fuzz") / "data") as server:
        helper = Admin(server)
        try:
            first, second = helper.tenant(credits=100), helper.tenant(credits=100)
            for tenant in (first, second):
                assert helper.chat(tenant.key.secret).status_code == 200
            yield helper, first, second
        finally:
            helper.client.close()


def test_hostile_if_none_match_values_are_answered_never_5xx(world: tuple[Admin, Tenant, Tenant]) -> None:
    print(f"fuzz: {COUNT} requests, seed {SEED} (MODELGATE_TEST_FUZZ_SEED={SEED} reproduces them)")
    admin, first, second = world
    rng = random.Random(SEED)
    callers = [first.admin, second.admin, admin.operator]
    balances = [admin.stored_account(t.account.id) for t in (first, second)]
    # Every caller's current tag of every report: the values that may rightly get a 304.
    current: dict[tuple[int, str], str] = {}
    for i, caller in enumerate(callers):
        for path in PATHS:
            answer = caller.request("GET", path)
            if answer.status_code == 200:
                current[i, path] = answer.headers["etag"]
    tags = sorted(set(current.values()))
    statuses: dict[int, int] = {}
    for _ in range(COUNT):
        i = rng.randrange(len(callers))
        path = rng.choice(PATHS)
        value = _hostile(rng, tags)
        try:
            answer = callers[i].request("GET", path, headers={"if-none-match": value})
        except httpx.LocalProtocolError:  # a value the client itself will not send
            continue
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, (path, value, answer.text)
        mine = current.get((i, path))
        if answer.status_code == 304:
            assert mine is not None and answer.content == b"", (path, value)
            assert matches(value.decode("latin-1"), mine), (path, value)
            assert answer.headers["etag"] == mine
        elif answer.status_code == 200:
            assert mine is not None and answer.headers["etag"] == mine
            assert not matches(value.decode("latin-1"), mine), (path, value)
            answer.json()
        else:
            assert 400 <= answer.status_code < 500 and mine is None, (path, answer.status_code)
            assert set(answer.json()["error"]) == {"type", "message"}
    print(f"fuzz: statuses {dict(sorted(statuses.items()))}")
    assert statuses.get(304, 0) > 0 and statuses.get(200, 0) > 0
    # Reads charge nothing.
    assert [admin.stored_account(t.account.id) for t in (first, second)] == balances

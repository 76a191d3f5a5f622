"""Hostile requests for a key's own view and rules (issue 32): ``/v1/key`` and ``/v1/key/usage``
with odd queries and credentials, model requests of a key bound to address ranges carrying odd
``X-Forwarded-For`` chains (the fuzz gateway trusts its loopback peer as a proxy, so every chain
is read), an expired key, and admin bodies with hostile ``expires_at``, ``allowed_ips`` and
``hide_balance``. Each answer must be a 4xx in the endpoint's format (or a success), never a 5xx.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from tests.fuzz.hostile import Hostile

KEY_QUERIES = [
    "", "?limit=0", "?limit=201", "?limit=-1", "?limit=1e3", "?limit=%C2%B2", "?limit=" + "9" * 5000,
    "?cursor=%FF", "?cursor=" + "1" * 5000, "?cursor=1.5~req_x", "?cursor=1e400~x", "?cursor=~",
    "?limit=2&cursor=99999999999999999.1~a", "?cursor=1.5~" + "r" * 101, "?cursor=1.5~a%00b", "?limit=&cursor=",
    "?limit=1&limit=2", "?cursor=NaN~x", "?cursor=-1~x",
]  # fmt: skip
FORWARDED = [
    "203.0.113.5", "not-an-ip", "203.0.113.5, x", ",,,", "300.1.1.1", "::ffff:203.0.113.5", "[2001:db8::1]",
    "203.0.113.5:443", ", ".join(["127.0.0.1"] * 200), "203.0.113.5, 127.0.0.1", "x" * 6000, "1.2.3.4/24",
    "0", "-1", "::", "fe80::1%eth0", "203.0.113.5 , 198.51.100.1", "unknown", "_hidden",
]  # fmt: skip
EXPIRIES: list[Any] = [
    "2027-13-01T00:00:00Z", "0000-00-00T00:00:00Z", "2027-01-01T00:00:00+25:00", "9" * 100, 5, 1.5e300,
    "2027-01-01T00:00:00.9999999999Z", "\uff11\uff12", "2027-01-01T00:00:00Z\n", "2027-01-01", "", [], {},
    "1969-12-31T23:59:59Z", "9999-12-31T23:59:59Z", "2027-02-29T00:00:00Z", "2027-01-01T00:00:60Z",
    "x" * 65, "2027-01-01T00:00:00-00:00", "+2027-01-01T00:00:00Z",
]  # fmt: skip
RANGES: list[Any] = [
    ["300.1.1.1/8"], ["10.0.0.0/8"] * 1000, ["x" * 100], [None], "10.0.0.0/8", [["a"]], ["fe80::1%eth0/64"],
    ["1.2.3.4/-1"], ["1.2.3.4/ 8"], ["10.0.0.0/33"], ["::/129"], [""], [5], {}, ["1.2.3.4/08"],
    [f"10.0.{i}.0/24" for i in range(300)], ["0.0.0.0/0", "::/0"], ["2001:db8::/32", "203.0.113.0/24"],
]  # fmt: skip


def admin_bodies(rng: random.Random) -> tuple[str, str, Any]:
    roll = rng.randrange(4)
    if roll == 0:
        return (
            "POST",
            "/admin/api/keys",
            {"account_id": 1, "group": "Pro", "expires_at": rng.choice(EXPIRIES)},
        )
    if roll == 1:
        return "POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "allowed_ips": rng.choice(RANGES)}
    if roll == 2:
        return "PATCH", "/admin/api/keys/key_nope", {"expires_at": rng.choice(EXPIRIES)}
    return "PATCH", "/admin/api/accounts/1", {"hide_balance": rng.choice([None, "true", 1, 0, [], "x", True])}


def key_requests(keys: dict[str, str], admin: str, rng: random.Random) -> Iterator[Hostile]:
    """``keys`` holds ``Basic``, ``Nova``, ``Restricted`` (bound to 203.0.113.0/24) and ``Expired``."""
    while True:
        roll = rng.randrange(4)
        key = rng.choice(
            [keys["Basic"], keys["Nova"], keys["Restricted"], keys["Expired"], "sk-cs4-nope", ""]
        )
        if roll == 0:
            path = rng.choice(["/v1/key", "/v1/key/usage", "/v1/key/", "/v1/key/usage/x", "/v1/keys"])
            messages = rng.random() < 0.5
            headers = (
                {} if not key else {"x-api-key": key} if messages else {"authorization": f"Bearer {key}"}
            )
            if rng.random() < 0.3:
                headers["x-forwarded-for"] = rng.choice(FORWARDED)
            method = rng.choice(["GET", "GET", "GET", "POST", "HEAD"])
            # The format of the calling SDK family: Messages when the client sends x-api-key.
            shape = "none" if method == "HEAD" else "messages" if "x-api-key" in headers else "openai"
            yield Hostile(method, path + rng.choice(KEY_QUERIES), headers, shape=shape, tags=["key-view"])
        elif roll == 1:
            key = rng.choice([keys["Restricted"], keys["Expired"]])
            headers = {"content-type": "application/json", "x-forwarded-for": rng.choice(FORWARDED)}
            body = {
                "model": "aria-haiku-4.5",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}],
            }
            if rng.random() < 0.5:
                headers |= {"x-api-key": key, "anthropic-version": "2023-06-01"}
                yield Hostile(
                    "POST", "/v1/messages", headers, json.dumps(body).encode(), "messages", ["key-rules"]
                )
            else:
                headers["authorization"] = f"Bearer {key}"
                yield Hostile(
                    "POST", "/v1/chat/completions", headers, json.dumps(body).encode(), tags=["key-rules"]
                )
        else:
            method, path, body = admin_bodies(rng)
            auth = {"authorization": f"Bearer {admin}", "content-type": "application/json"}
            yield Hostile(method, path, auth, json.dumps(body).encode(), "admin", ["key-admin-body"])

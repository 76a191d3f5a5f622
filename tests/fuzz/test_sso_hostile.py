"""Hostile inputs to single sign-on against a gateway with it configured and a real provider on
loopback: callback parameters (garbage, huge, non-ASCII, repeated, a real state with a forged
code), invitation tokens on the sign-in link, session cookies and CSRF headers. Every answer is a
4xx in the admin API's error shape, never a 5xx, and no session is ever made."""

from __future__ import annotations

import os
import random
import string
from collections.abc import Iterator
from urllib.parse import parse_qsl, quote, urlsplit

import httpx
import orjson
import pytest

from tests.admin.sso_fixtures import OPERATORS, SsoSetup, person, sso_gateway

SEED = int(os.environ.get("MODELGATE_TEST_FUZZ_SEED", "0") or random.randrange(1 << 30))
COUNT = 300


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SsoSetup]:
    with sso_gateway(tmp_path_factory.mktemp("sso-fuzz") / "data") as setup:
        yield setup


def garbage(rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:
        return ""
    if kind == 1:
        return "A" * rng.choice([4096, 4097, 10_000, 60_000])
    if kind == 2:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(1, 200)))
    if kind == 3:
        return "".join(chr(rng.randrange(0x80, 0x2FFF)) for _ in range(rng.randrange(1, 50)))
    if kind == 4:
        return rng.choice(["\x00", "%00", "../../", "mg-inv-", "mg-inv-" + "x" * 43, "null", "[]", "{}"])
    if kind == 5:
        return "".join(rng.choice(string.ascii_letters + "-_") for _ in range(43))
    return rng.choice(["\r\n", "\t", " ", "é", "💥"]) * rng.randrange(1, 30)


def hostile_urls(rng: random.Random) -> Iterator[tuple[str, dict[str, str]]]:
    for _ in range(COUNT):
        kind = rng.randrange(6)
        if kind == 0:
            query = f"code={quote(garbage(rng))}&state={quote(garbage(rng))}"
            yield "/admin/api/sso/callback?" + query, {}
        elif kind == 1:
            yield f"/admin/api/sso/callback?error={quote(garbage(rng))}&error_description=x", {}
        elif kind == 2:
            yield f"/admin/api/sso/callback?code=a&code=b&state={quote(garbage(rng))}&state=z", {}
        elif kind == 3:
            yield f"/admin/api/sso/login?invite={quote(garbage(rng) or 'mg-inv-')}", {}
        elif kind == 4:
            # What a client can send in a header at all: visible ASCII without the cookie separators.
            cookie = "".join(c for c in garbage(rng) if "!" <= c <= "~" and c not in ";,") or "x"
            yield "/admin/api/me", {"cookie": f"mg_session={cookie}"}
        else:
            yield "/admin/api/sso/callback?" + quote(garbage(rng), safe="=&"), {}


def check_refusal(response: httpx.Response, what: str) -> None:
    assert 400 <= response.status_code < 500, (what, response.status_code, response.text[:300])
    body = orjson.loads(response.content)
    assert isinstance(body["error"]["type"], str) and isinstance(body["error"]["message"], str), what
    assert "mg_session=" not in response.headers.get("set-cookie", ""), what


def test_hostile_callbacks_invites_and_cookies_are_refused_with_4xx(sso: SsoSetup) -> None:
    rng = random.Random(SEED)
    with sso.browser() as client:
        for url, headers in hostile_urls(rng):
            check_refusal(client.get(url, headers=headers), f"seed {SEED}: GET {url[:200]} {headers}")


def test_a_real_state_with_a_forged_code_is_refused(sso: SsoSetup) -> None:
    rng = random.Random(SEED + 1)
    user = sso.provider.add_user(person("Fuzz", OPERATORS))
    with sso.browser() as client:
        for _ in range(10):
            state = dict(parse_qsl(urlsplit(sso.start(client)).query))["state"]
            code = garbage(rng) or "x"
            check_refusal(
                client.get("/admin/api/sso/callback", params={"code": code, "state": state}),
                f"seed {SEED}: forged code {code[:80]!r}",
            )
        # After all that the real flow still works.
        assert sso.sign_in(client, user.sub).status_code == 303


def test_hostile_csrf_headers_are_refused(sso: SsoSetup) -> None:
    rng = random.Random(SEED + 2)
    user = sso.provider.add_user(person("Csrf", OPERATORS))
    with sso.browser() as client:
        assert sso.sign_in(client, user.sub).status_code == 303
        for _ in range(50):
            value = "".join(c for c in garbage(rng) if "!" <= c <= "~") or "x"
            response = client.post(
                "/admin/api/accounts", json={"name": "never"}, headers={"x-csrf-token": value}
            )
            check_refusal(response, f"seed {SEED}: csrf {value[:80]!r}")
        assert not [
            a for a in sso.gateway.call(sso.gateway.services.accounts.list_accounts()) if a.name == "never"
        ]


#: A member's usage log and key list (their own keys only, filtered in the database): the
#: parameters hostile values go into.
MEMBER_PATHS = (
    "/admin/api/usage",
    "/admin/api/usage/records",
    "/admin/api/usage/records.csv",
    "/admin/api/usage/quality",
    "/admin/api/keys",
)
MEMBER_PARAMS = (
    "key_id",
    "account_id",
    "cursor",
    "from",
    "to",
    "model",
    "endpoint",
    "status",
    "limit",
    "q",
    "after",
    "month",
)


def test_hostile_queries_of_a_members_own_usage_and_keys(sso: SsoSetup) -> None:
    """Whatever a member puts in the query, the answer is theirs or a 4xx: never a 5xx, and never
    a record or key of someone else in the account."""
    rng = random.Random(SEED + 3)
    account = sso.gateway.account("fuzz-members")
    token = sso.gateway.call(sso.gateway.management.create_admin_token(None))
    with httpx.Client(
        base_url=sso.gateway.base_url, headers={"authorization": f"Bearer {token}"}
    ) as operator:
        link = operator.post("/admin/api/invites", json={"account_id": account.id}).json()["link"]
    other = sso.gateway.key(account, "Basic", name="not-the-members")
    with sso.browser() as member, httpx.Client(base_url=sso.gateway.base_url, timeout=30) as api:
        user = sso.provider.add_user(person("Member Fuzz"))
        assert sso.sign_in(member, user.sub, path=link).status_code == 303
        own = sso.write(member, "POST", "/keys", {"group": "Basic", "name": "members-own"}).json()
        for secret in (own["secret"], other.secret):
            sent = api.post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer {secret}"},
                json={
                    "model": "aria-haiku-4.5",
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": "x"}],
                },
            )
            assert sent.status_code == 200, sent.text
        sso.gateway.call(sso.gateway.services.settlements.drain())
        values = [
            other.record.id,
            own["id"],
            str(account.id),
            "0",
            "-1",
            "99999999999999999999",
            "0000-01",
            "9999-12",
        ]
        for _ in range(COUNT):
            path = rng.choice(MEMBER_PATHS)
            params = {
                name: rng.choice([*values, garbage(rng)])
                for name in rng.sample(MEMBER_PARAMS, rng.randrange(1, 4))
            }
            what = f"seed {SEED}: GET {path} {str(params)[:300]}"
            response = member.get(path, params=params)
            assert response.status_code < 500, (what, response.status_code, response.text[:300])
            if response.status_code >= 400:
                check_refusal(response, what)  # (it may echo what was sent, nothing more)
            else:
                assert other.record.id not in response.text, what

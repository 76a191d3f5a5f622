"""Key controls end to end under traffic: rotation with a grace period (no failed request while
clients move, old secret refused from the end of the grace, spend and cap carried over),
revocation on the first request after the key view's refresh without touching other keys,
allowed-model changes, and the money headers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import httpx

from modelgate.clock import month_of
from modelgate.management import IssuedKey
from tests.billing.helpers import Seen, body_for, headers_for, records_of, send
from tests.gateway_server import GatewayServer, ManualClock, running_gateway
from tests.whole_store import whole_store

T = TypeVar("T")

#: Seconds of grace after the rotation. The gateway runs on a ``ManualClock``, so the grace ends
#: when the test moves the clock, whatever the machine's speed.
GRACE = 60.0


def _quiet_request(gateway: GatewayServer, secret: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/v1/messages",
        json=body_for("messages", "aria-haiku-4.5", "Hello there gateway", 20),
        headers=headers_for("messages", secret),
    )


async def _on_gateway(gateway: GatewayServer, coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the gateway's loop from the test's own loop."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, gateway.loop))


def test_rotation_under_traffic_loses_no_request_and_carries_spend_over(tmp_path: Path) -> None:
    clock = ManualClock(time.time())
    with running_gateway(tmp_path / "data", clock=clock) as gateway:
        cap = 10_000_000
        issued = gateway.key(gateway.account("acme"), "Pro", rpm=100_000, monthly_cap_uc=cap)
        store, month = whole_store(gateway.services), month_of(clock.time())
        seen: list[tuple[str, Seen]] = []
        state = {"secret": issued.secret}

        async def traffic(stop: asyncio.Event) -> None:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:

                async def worker(n: int) -> None:
                    fmt = ("messages", "chat")[n % 2]
                    while not stop.is_set():
                        secret = state["secret"]
                        result = await send(
                            client, fmt, secret, "aria-haiku-4.5", max_tokens=20, stream=n % 3 == 0
                        )
                        seen.append((secret, result))

                await asyncio.gather(*(worker(n) for n in range(6)))

        async def served(count: int) -> None:
            """Let the traffic make ``count`` more requests (phases are counted, not timed)."""
            target = len(seen) + count
            while len(seen) < target:
                await asyncio.sleep(0.01)

        async def scenario() -> IssuedKey:
            stop = asyncio.Event()
            load = asyncio.create_task(traffic(stop))
            await served(12)
            rotated = await _on_gateway(gateway, gateway.management.rotate_key(issued.record, GRACE))
            await served(12)  # clients keep the old secret for a while, then move
            # The new secret works once the key view's own refresh loaded the rotation.
            await asyncio.to_thread(gateway.wait_for_key_version, issued.record.id, rotated.record.version)
            state["secret"] = rotated.secret
            await served(12)
            stop.set()
            await load
            return rotated

        spend_before_traffic = gateway.call(store.month_spend(issued.record.id, month))
        assert spend_before_traffic == (0, 0)
        rotated = asyncio.run(scenario())
        new_secret = rotated.secret

        failures = [(s[:12], r.status, r.body) for s, r in seen if r.status != 200]
        assert failures == []
        assert {s for s, _ in seen} == {issued.secret, new_secret}  # both secrets carried traffic

        # The old secret works to the last moment of its grace and is refused from then on; the
        # new one works on.
        grace_ends = rotated.record.previous_expires_at
        assert grace_ends == clock.time() + GRACE
        clock.set(grace_ends - 0.5)
        assert _quiet_request(gateway, issued.secret).status_code == 200
        clock.set(grace_ends)
        assert _quiet_request(gateway, issued.secret).status_code == 401
        probes_admitted = 1

        # One key record, one spend: everything both secrets spent is on it, and the cap shows it.
        spent, held = gateway.call(store.month_spend(issued.record.id, month))
        assert held == 0 and spent == sum(r.charged_uc for r in records_of(gateway, issued.record.id))
        assert len(records_of(gateway, issued.record.id)) == len(seen) + probes_admitted
        after = _quiet_request(gateway, new_secret)
        charged = int(after.headers["x-modelgate-credits-charged"])
        assert int(after.headers["x-modelgate-cap-remaining"]) == cap - spent - charged
        record = gateway.call(store.get_key(issued.record.id))
        assert record is not None and record.monthly_cap_uc == cap and record.state == "active"


def test_revocation_is_honoured_at_once_and_other_keys_are_untouched(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        account = gateway.account("acme")
        doomed = gateway.key(account, "Basic", rpm=100_000)
        sibling = gateway.key(account, "Basic", rpm=100_000)

        async def scenario() -> tuple[list[int], list[Seen]]:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:

                async def pair() -> None:
                    doomed_seen, sibling_seen = await asyncio.gather(
                        send(client, "chat", doomed.secret, "haiku"),
                        send(client, "messages", sibling.secret, "haiku"),
                    )
                    statuses.append(doomed_seen.status)
                    siblings.append(sibling_seen)
                    if doomed_seen.status == 401:
                        assert "revoked" in doomed_seen.body["error"]["message"]

                statuses: list[int] = []
                siblings: list[Seen] = []
                await pair()
                revoked = await _on_gateway(gateway, gateway.management.revoke_key(doomed.record))
                refreshed = asyncio.create_task(
                    asyncio.to_thread(gateway.wait_for_key_version, doomed.record.id, revoked.version)
                )
                while not refreshed.done():  # traffic on both keys while the view refreshes
                    await pair()
                await refreshed  # raises if the view never loaded the revocation
                await pair()  # the first requests after the refresh
                await pair()
                return statuses, siblings

        statuses, siblings = asyncio.run(scenario())
        # Admitted before the revocation, refused on the first request after the key view's
        # refresh, and from the first refusal on refused for good.
        assert statuses[0] == 200 and statuses[-2:] == [401, 401]
        first_refusal = statuses.index(401)
        assert statuses[first_refusal:] == [401] * (len(statuses) - first_refusal)
        assert set(statuses[:first_refusal]) == {200}
        assert all(s.status == 200 for s in siblings)


def test_allowed_models_change_takes_effect_with_aliases_resolved_first(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        issued = gateway.key(gateway.account("acme"), "Basic", rpm=100_000)
        assert _quiet_request(gateway, issued.secret).status_code == 200  # aria-haiku-4.5
        updated = gateway.call(gateway.management.update_key(issued.record, models=["sonnet"]))
        gateway.wait_for_key_version(issued.record.id, updated.version)
        # The first request after the key view's refresh already sees the new list.
        assert _quiet_request(gateway, issued.secret).status_code == 404
        via_alias = httpx.post(
            f"{gateway.base_url}/v1/messages",
            json=body_for("messages", "sonnet", "hi", 5),
            headers=headers_for("messages", issued.secret),
        )
        assert via_alias.status_code == 200 and via_alias.json()["model"] == "aria-sonnet-4.6"


def test_money_headers_on_whole_and_streamed_responses(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        account = gateway.account("acme", credits=3)
        cap = 2_000_000
        issued = gateway.key(account, "Pro", rpm=100_000, monthly_cap_uc=cap)
        free = gateway.key(account, "Pro", rpm=100_000)

        async def run() -> list[Seen]:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
                return [
                    await send(client, "messages", issued.secret, "aria-sonnet-4.6"),
                    await send(client, "chat", issued.secret, "aria-sonnet-4.6", stream=True),
                    await send(client, "chat", free.secret, "aria-sonnet-4.6"),
                ]

        whole, streamed, uncapped = asyncio.run(run())
        records = {r.request_id: r for r in records_of(gateway, issued.record.id)}
        first = records[whole.request_id]
        # Whole response: the exact charge, and what is left after it (µc).
        assert int(whole.headers["x-modelgate-credits-charged"]) == first.charged_uc > 0
        assert int(whole.headers["x-modelgate-cap-remaining"]) == cap - first.charged_uc
        assert int(whole.headers["x-modelgate-balance-remaining"]) == 3_000_000 - first.charged_uc
        # Stream: the charge is unknown when headers go out; the figures are after its hold.
        assert "x-modelgate-credits-charged" not in streamed.headers
        cap_left = int(streamed.headers["x-modelgate-cap-remaining"])
        balance_left = int(streamed.headers["x-modelgate-balance-remaining"])
        assert cap_left < cap - first.charged_uc and balance_left < 3_000_000 - first.charged_uc
        assert cap - first.charged_uc - cap_left == 3_000_000 - first.charged_uc - balance_left  # the hold
        # A key without a cap has no cap header.
        assert "x-modelgate-cap-remaining" not in uncapped.headers
        assert int(uncapped.headers["x-modelgate-credits-charged"]) > 0


def test_upstream_failure_releases_the_hold_and_the_error_shows_the_figures_after_it(tmp_path: Path) -> None:
    from tests.fakes.upstream import refused_base_url

    providers = [
        {"name": "simulator", "kind": "simulator"},
        {"name": "dead", "kind": "anthropic", "base_url": refused_base_url(), "api_key_env": "DEAD_KEY"},
    ]
    deployments = {"aria-opus-4.6": [{"provider": "dead", "upstream_model": "gone"}]}
    with running_gateway(
        tmp_path / "data", env={"DEAD_KEY": "x"}, providers=providers, deployments=deployments
    ) as gateway:
        cap = 5_000_000
        issued = gateway.key(gateway.account("acme", credits=7), "Pro", rpm=50, monthly_cap_uc=cap)
        failed = httpx.post(
            f"{gateway.base_url}/v1/messages",
            json=body_for("messages", "aria-opus-4.6", "hi", 100),
            headers=headers_for("messages", issued.secret),
        )
        assert failed.status_code >= 500
        assert failed.headers["ratelimit"].startswith("rpm;r=49;")
        assert failed.headers["ratelimit-policy"] == "rpm;q=50;w=60"
        # Nothing was charged and nothing is held any more.
        assert int(failed.headers["x-modelgate-balance-remaining"]) == 7_000_000
        assert int(failed.headers["x-modelgate-cap-remaining"]) == cap
        (record,) = records_of(gateway, issued.record.id)
        assert record.charged_uc == 0 and record.status.startswith("upstream_")


def test_max_tokens_is_clamped_to_what_the_cap_affords_and_refused_below_the_input(tmp_path: Path) -> None:
    import orjson

    from modelgate.billing.pricing import affordable_output_tokens, bound_uc, input_tokens_bound

    with running_gateway(tmp_path / "data") as gateway:
        price = gateway.services.catalogue.models["aria-sonnet-4.6"].price
        raw = orjson.dumps(body_for("messages", "aria-sonnet-4.6", "Hello there gateway", 4000))
        in_bound = input_tokens_bound(len(raw), 0, 128, 1600)
        cap = bound_uc(in_bound, 25, price)  # room for the input and 25 output tokens
        issued = gateway.key(gateway.account("acme"), "Pro", rpm=1000, monthly_cap_uc=cap)
        url, headers = (
            f"{gateway.base_url}/v1/messages",
            {
                **headers_for("messages", issued.secret),
                "content-type": "application/json",
            },
        )
        clamped = httpx.post(url, content=raw, headers=headers)
        assert clamped.status_code == 200
        granted = affordable_output_tokens(cap, in_bound, price)
        assert granted == 25
        assert clamped.headers["x-modelgate-max-tokens-clamped"] == f"4000->{granted}; reason=credits"
        assert clamped.json()["usage"]["output_tokens"] <= granted
        assert clamped.json()["stop_reason"] == "max_tokens"  # the simulator had more to say
        # What is left cannot hold even the input: refused, in the Messages format.
        refused = httpx.post(url, content=raw, headers=headers)
        assert refused.status_code == 402
        assert refused.json()["error"]["details"] == {"error_code": "monthly_cap_reached"}
        assert int(clamped.headers["x-modelgate-cap-remaining"]) == cap - int(
            clamped.headers["x-modelgate-credits-charged"]
        )

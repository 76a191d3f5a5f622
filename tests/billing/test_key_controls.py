"""Key controls end to end under traffic: rotation with a grace period (no failed request while
clients move, old secret refused within 1 s after the grace, spend and cap carried over),
revocation at once without touching other keys, allowed-model changes, and the money headers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from modelgate.clock import month_of
from tests.billing.helpers import Seen, body_for, headers_for, records_of, send
from tests.gateway_server import GatewayServer, running_gateway

GRACE = 1.5


def _quiet_request(gateway: GatewayServer, secret: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/v1/messages",
        json=body_for("messages", "aria-haiku-4.5", "Hello there gateway", 20),
        headers=headers_for("messages", secret),
    )


def test_rotation_under_traffic_loses_no_request_and_carries_spend_over(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        cap = 10_000_000
        issued = gateway.key(gateway.account("acme"), "Pro", rpm=100_000, monthly_cap_uc=cap)
        store, month = gateway.services.store, month_of(time.time())
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

        async def scenario() -> tuple[float, str]:
            stop = asyncio.Event()
            load = asyncio.create_task(traffic(stop))
            await asyncio.sleep(0.5)
            rotated = await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(
                    gateway.management.rotate_key(issued.record, GRACE), gateway.loop
                )
            )
            rotated_at = time.monotonic()
            await asyncio.sleep(0.5)  # clients keep the old secret for a while, then move
            state["secret"] = rotated.secret
            await asyncio.sleep(0.7)
            stop.set()
            await load
            return rotated_at, rotated.secret

        spend_before_traffic = gateway.call(store.month_spend(issued.record.id, month))
        assert spend_before_traffic == (0, 0)
        rotated_at, new_secret = asyncio.run(scenario())

        failures = [(s[:12], r.status, r.body) for s, r in seen if r.status != 200]
        assert failures == []
        assert {s for s, _ in seen} == {issued.secret, new_secret}  # both secrets carried traffic

        # The old secret stops within 1 s after its grace; the new one works on.
        probes_admitted = 0
        while True:
            status = _quiet_request(gateway, issued.secret).status_code
            elapsed = time.monotonic() - rotated_at
            if status == 401:
                break
            assert status == 200 and elapsed < GRACE + 1.0, (status, elapsed)
            probes_admitted += 1
            time.sleep(0.05)
        assert elapsed > GRACE - 0.3  # and not (much) before the grace ended

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

        async def scenario() -> tuple[list[Seen], float | None]:
            async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
                await send(client, "chat", doomed.secret, "haiku")
                future = asyncio.run_coroutine_threadsafe(
                    gateway.management.revoke_key(doomed.record), gateway.loop
                )
                await asyncio.wrap_future(future)
                revoked_at = time.monotonic()
                refused_after: float | None = None
                siblings: list[Seen] = []
                while time.monotonic() - revoked_at < 1.5:
                    results = await asyncio.gather(
                        send(client, "chat", doomed.secret, "haiku"),
                        send(client, "messages", sibling.secret, "haiku"),
                    )
                    siblings.append(results[1])
                    if results[0].status == 401 and refused_after is None:
                        refused_after = time.monotonic() - revoked_at
                        assert "revoked" in results[0].body["error"]["message"]
                    if refused_after is not None:
                        assert results[0].status == 401  # and it stays refused
                return siblings, refused_after

        siblings, refused_after = asyncio.run(scenario())
        assert refused_after is not None and refused_after <= 1.0
        assert all(s.status == 200 for s in siblings)


def test_allowed_models_change_takes_effect_with_aliases_resolved_first(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data") as gateway:
        issued = gateway.key(gateway.account("acme"), "Basic", rpm=100_000)
        assert _quiet_request(gateway, issued.secret).status_code == 200  # aria-haiku-4.5
        gateway.call(gateway.management.update_key(issued.record, models=["sonnet"]))
        deadline = time.monotonic() + 1.0
        while _quiet_request(gateway, issued.secret).status_code != 404:
            assert time.monotonic() < deadline, "allowed-models change not honoured within 1 s"
            time.sleep(0.05)
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
        assert failed.headers["ratelimit"].startswith("limit=50, remaining=49")
        assert failed.headers["ratelimit-policy"] == "50;w=60"
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
        in_bound = input_tokens_bound(len(raw), 0, 1024, 1600)
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

"""Structured logs of a real ``modelgate serve`` (issue 12): JSON lines by default when stderr is
not a terminal, one request record per request with the documented fields, the request id the
client saw on every line about its request, no body ever; and the text format."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import secrets
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelgate.cli.serve import warn_if_metrics_public
from modelgate.config import load_settings
from modelgate.telemetry.logs import REQUEST_FIELDS, JsonFormatter, RequestLineWriter, request_fields
from modelgate.telemetry.record import RequestRecord
from tests.fakes.upstream import refused_base_url
from tests.hardening.process import GatewayProcess, Seeded

#: A route to nowhere: its requests fail upstream (a warning line about the request).
DEAD_ROUTE = f"""
[[providers]]
name = "simulator"
kind = "simulator"

[[providers]]
name = "dead"
kind = "openai-compatible"
base_url = "{refused_base_url()}"

[[deployments."nova-5.6-sol"]]
provider = "dead"
upstream_model = "nowhere"
"""


def lines(gateway: GatewayProcess) -> list[str]:
    """What it wrote to stderr (its logs; the start banner goes to stdout)."""
    return [line for line in gateway.stderr.read_text().splitlines() if line.strip()]


def usage_of(gateway: GatewayProcess, request_id: str) -> tuple[int, int, int]:
    """(input tokens, output tokens, charged µc) of a request's usage record."""
    with gateway.db() as db:
        row = db.execute(
            "SELECT input_tokens, output_tokens, charged_uc FROM usage_records WHERE request_id = ?",
            (request_id,),
        ).fetchone()
    assert row is not None, request_id
    return int(row[0]), int(row[1]), int(row[2])


def traffic(gateway: GatewayProcess, keys: Seeded, marker: str) -> dict[str, dict[str, Any]]:
    """Requests whose prompts carry ``marker``; what each client saw, by request id."""
    url, nova, basic = gateway.base_url, keys.keys["Nova"], keys.keys["Basic"]
    seen: dict[str, dict[str, Any]] = {}
    prompt = [{"role": "user", "content": f"{marker} hello"}]
    with httpx.Client(timeout=30) as client:
        whole = client.post(
            f"{url}/v1/chat/completions",
            headers={"authorization": f"Bearer {nova}"},
            json={"model": "nova-5.5", "messages": prompt},
        )
        seen[whole.headers["x-request-id"]] = {"status": 200, "stream": False, "outcome": "ok"}
        with client.stream(
            "POST",
            f"{url}/v1/messages",
            headers={"x-api-key": basic, "anthropic-version": "2023-06-01"},
            json={"model": "aria-haiku-4.5", "max_tokens": 64, "messages": prompt, "stream": True},
        ) as streamed:
            streamed.read()
        seen[streamed.headers["request-id"]] = {"status": 200, "stream": True, "outcome": "ok"}
        refused = client.post(
            f"{url}/v1/chat/completions",
            headers={"authorization": f"Bearer {basic}"},
            json={"model": "nova-5.5", "messages": prompt},
        )
        assert refused.status_code == 404
        seen[refused.headers["x-request-id"]] = {
            "status": 404,
            "stream": False,
            "outcome": "refused_not_found",
        }
        dead = client.post(
            f"{url}/v1/chat/completions",
            headers={"authorization": f"Bearer {nova}"},
            json={"model": "nova-5.6-sol", "messages": prompt},
        )
        assert dead.status_code == 503
        seen[dead.headers["x-request-id"]] = {"status": 503, "stream": False, "outcome": "upstream_error"}
    return seen


def test_json_lines_with_one_request_record_each_and_the_request_id_on_every_line(tmp_path: Path) -> None:
    marker = "marker-" + secrets.token_hex(8)
    gateway = GatewayProcess(tmp_path, DEAD_ROUTE, stderr_apart=True)
    with gateway:
        keys = gateway.seed()
        gateway.start()
        seen = traffic(gateway, keys, marker)
        gateway.signal(signal.SIGTERM)  # a clean stop: every line is written
        assert gateway.wait(30) in (0, -signal.SIGTERM)
    assert marker not in gateway.stderr.read_text() + gateway.log.read_text()  # no prompt, no body
    records = [json.loads(line) for line in lines(gateway)]  # every line is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    assert all(r["ts"].endswith("Z") and r["level"] in {"debug", "info", "warning", "error"} for r in records)

    requests = [r for r in records if r["logger"] == "modelgate.requests"]
    assert sorted(r["request_id"] for r in requests) == sorted(seen)
    for record in requests:
        assert list(record)[4:] == list(REQUEST_FIELDS)  # ts, level, logger, msg, then the fields
        expected = seen[record["request_id"]]
        assert (record["status"], record["stream"], record["outcome"]) == (
            expected["status"],
            expected["stream"],
            expected["outcome"],
        )
        assert record["total_ms"] > 0 and record["key_id"] and record["account_id"] == keys.account_id
        if record["outcome"] == "ok":
            usage = usage_of(gateway, record["request_id"])
            assert (record["input_tokens"], record["output_tokens"], record["charged_uc"]) == usage
            assert record["provider"] == "simulator" and record["attempts"] == 1
            assert record["upstream_ms"] is not None and record["usage_status"] == "ok"
        assert (record["ttft_ms"] is not None) == (record["stream"] and record["outcome"] == "ok")
    dead = next(r for r in requests if r["outcome"] == "upstream_error")
    assert (dead["error_type"], dead["provider"], dead["deployment"]) == ("unavailable", "dead", "nowhere")
    assert dead["charged_uc"] == 0 and dead["usage_status"] == "upstream_unavailable"
    refused = next(r for r in requests if r["status"] == 404)
    assert (refused["error_type"], refused["error_code"], refused["attempts"]) == (
        "not_found",
        "model_not_found",
        0,
    )
    # The router's warning about the dead upstream names the request its client saw.
    warnings = [r for r in records if r["logger"] == "modelgate.upstream" and r["level"] == "warning"]
    assert warnings and {w["request_id"] for w in warnings} == {dead["request_id"]}


def test_the_text_format_and_turning_the_request_record_off(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "text", top='log_format = "text"', stderr_apart=True)
    with gateway:
        keys = gateway.seed()
        gateway.start()
        answer = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            headers={"authorization": f"Bearer {keys.keys['Nova']}"},
            json={"model": "nova-5.5", "messages": [{"role": "user", "content": "hi"}]},
        )
        request_id = answer.headers["x-request-id"]
    text_lines = lines(gateway)
    request_lines = [line for line in text_lines if " modelgate.requests: request " in line]
    assert len(request_lines) == 1
    assert f"request_id={request_id}" in request_lines[0] and "status=200 outcome=ok" in request_lines[0]
    assert not any(line.startswith("{") for line in text_lines)

    quiet = GatewayProcess(tmp_path / "quiet", top="request_log = false", stderr_apart=True)
    with quiet:
        keys = quiet.seed()
        quiet.start()
        httpx.post(
            f"{quiet.base_url}/v1/chat/completions",
            headers={"authorization": f"Bearer {keys.keys['Nova']}"},
            json={"model": "nova-5.5", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert not any("modelgate.requests" in line for line in lines(quiet))


def test_serve_warns_when_metrics_are_public_on_a_reachable_address(caplog: pytest.LogCaptureFixture) -> None:
    def warned(host: str, **metrics: Any) -> bool:
        caplog.clear()
        settings = load_settings(None, environ={}, server={"host": host}, metrics=metrics or None)
        with caplog.at_level(logging.WARNING, logger="modelgate"):
            warn_if_metrics_public(settings)
        return any("/metrics is public" in r.getMessage() for r in caplog.records)

    assert warned("0.0.0.0") and warned("10.1.2.3")
    assert not warned("127.0.0.1") and not warned("::1") and not warned("localhost")
    assert not warned("0.0.0.0", token="t" * 16) and not warned("0.0.0.0", enabled=False)


@pytest.mark.parametrize("worker", [None, 2])
def test_the_fast_json_writer_writes_the_same_record_as_the_logging_path(worker: int | None) -> None:
    record = RequestRecord(
        "req_same",
        "chat",
        model="nova-5.5",
        status=200,
        attempts=1,
        provider="p",
        deployment="d",
        seconds=0.5,
    )
    stream = io.StringIO()
    writer = RequestLineWriter(stream, worker=worker)
    writer(record)  # no running loop: written at once
    fast = json.loads(stream.getvalue())
    logged = logging.LogRecord("modelgate.requests", logging.INFO, "", 0, "request", (), None)
    logged.fields = request_fields(record)
    if worker is not None:
        logged.worker = worker  # as the worker processes' filter tags every record
    slow = json.loads(JsonFormatter().format(logged))
    assert fast.pop("ts").endswith("Z") and slow.pop("ts").endswith("Z")
    assert list(fast.items()) == list(slow.items())


async def test_the_fast_writer_batches_lines_into_few_writes() -> None:
    class Counting(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            Counting.writes += 1
            return super().write(text)

    stream = Counting()
    writer = RequestLineWriter(stream)
    for n in range(5):
        writer(RequestRecord(f"req_{n}", "chat"))
    assert stream.getvalue() == ""  # nothing yet: the lines wait for the flush interval
    await asyncio.sleep(RequestLineWriter.FLUSH_SECONDS * 2)
    assert Counting.writes == 1 and [
        json.loads(line)["request_id"] for line in stream.getvalue().splitlines()
    ] == [f"req_{n}" for n in range(5)]

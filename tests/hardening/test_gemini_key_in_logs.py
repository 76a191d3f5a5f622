"""A Gemini client's key sent as ``?key=`` (what curl examples do) never reaches a log line or an
answer: the access log shows the query with the value redacted, the request records carry only
the key's id, and no refusal repeats the URL's query. A real ``modelgate serve`` with its access
log on, every line it wrote read back. The sign-in's one-time values (an invitation link's token,
the provider's ``code`` and ``state``) are kept out of the access log the same way."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.hardening.process import GatewayProcess

HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}


def test_a_key_in_the_query_never_reaches_the_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELGATE_LOG_LEVEL", "info")
    gateway = GatewayProcess(tmp_path, server={"access_log": True})
    with gateway:
        seeded = gateway.seed()
        gateway.start()
        key = seeded.keys["Basic"]
        wrong = "sk-cs4-" + "Z" * 38
        answers: list[httpx.Response] = []
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            model = "/v1beta/models/aria-haiku-4.5"
            answers += [
                client.post(f"{model}:generateContent?key={key}", json=HELLO),
                client.post(f"{model}:streamGenerateContent?alt=sse&key={key}", json=HELLO),
                client.post(f"{model}:streamGenerateContent?key={key}", json=HELLO),  # no alt=sse: 400
                client.post(f"/v1/models/aria-haiku-4.5:countTokens?key={key}", json=HELLO),
                client.get(f"/v1beta/models?key={key}&pageSize=2"),
                client.get(f"/v1/models?key={key}"),
                client.get(f"/v1beta/models/nova-5.5?key={key}"),  # 404: not this key's
                client.post(f"/v1beta/models/nova-5.5:generateContent?key={key}", json=HELLO),
                client.post(f"{model}:embedContent?key={key}", json=HELLO),  # no such method: 404
                client.get(f"{model}:generateContent?key={key}"),  # wrong verb: 405
                client.post(f"{model}:generateContent?key={key}", content=b"{broken"),
                client.post(f"{model}:generateContent?key={wrong}", json=HELLO),  # 401
            ]
            # Single sign-on is off here (404), but the URLs are logged all the same.
            invite, code, state = "mg-inv-" + "I" * 32, "C0de" * 8, "St4te" * 8
            signing_in = [
                client.get(f"/admin/api/sso/login?invite={invite}"),
                client.get(f"/admin/api/sso/callback?code={code}&state={state}"),
            ]
        statuses = [a.status_code for a in answers]
        assert statuses == [200, 200, 400, 200, 200, 200, 404, 404, 404, 405, 400, 401]
        for answer in answers:
            assert key not in answer.text and wrong not in answer.text
            assert key not in str(answer.headers) and wrong not in str(answer.headers)
        # A clean stop writes every buffered line (the request records are written in batches):
        # one record per model-route request (the unrouted method and the wrong verb have none).
        gateway.signal(signal.SIGTERM)
        gateway.wait(30)
        log = gateway.log.read_text()
        assert key not in log and wrong not in log
        assert [a.status_code for a in signing_in] == [404, 404]
        assert invite not in log and code not in log and state not in log
        assert "/admin/api/sso/callback?code=[redacted]&state=[redacted]" in log
        assert log.count("uvicorn.access") >= len(answers) and log.count('"msg":"request"') == 7
        # httpx sends the colon of the path escaped; the server routes the decoded path.
        assert "aria-haiku-4.5%3AgenerateContent?key=[redacted] " in log
        assert "%3AstreamGenerateContent?alt=sse&key=[redacted] " in log
        assert "/v1beta/models?key=[redacted]&pageSize=2" in log

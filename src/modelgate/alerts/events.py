"""An alert and the bytes a webhook receives: the JSON event (or a Slack message) and its
signature.

Body (``format = "json"``): ``{"event", "at", "subject", "window", …figures}``; ``subject``
names the key (``key:key_…``), account (``account:3``) or deployment (``deployment:…``) and
``window`` the crossing it reports (one alert per event, subject and window). Signature:
``x-modelgate-signature: sha256=<hex HMAC-SHA256 of the exact body with the webhook's secret>``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from modelgate.alerts.config import Event, WebhookConfig

SIGNATURE_HEADER = "x-modelgate-signature"


@dataclass(frozen=True, slots=True)
class Alert:
    event: Event
    subject: str
    #: What makes this crossing distinct from the next one (a month and a level, a ledger entry).
    window: str
    at: float
    figures: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        moment = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "event": self.event,
            "at": moment,
            "subject": self.subject,
            "window": self.window,
            **self.figures,
        }

    def summary(self) -> str:
        figures = ", ".join(f"{k} {v}" for k, v in self.figures.items())
        return f"modelgate {self.event}: {self.subject} ({figures})"


def body_for(alert: Alert, webhook: WebhookConfig) -> bytes:
    if webhook.format == "slack":
        return orjson.dumps({"text": alert.summary(), "modelgate": alert.payload()})
    return orjson.dumps(alert.payload())


def signature(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()

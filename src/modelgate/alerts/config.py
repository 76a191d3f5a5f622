"""``[alerts]`` and ``[[alerts.webhooks]]`` in the configuration file (docs/configuration.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Event = Literal["balance.low", "cap.threshold", "upstream.down", "key.revoked", "key.expiring"]
EVENTS: tuple[Event, ...] = ("balance.low", "cap.threshold", "upstream.down", "key.revoked", "key.expiring")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WebhookConfig(_Section):
    #: Where the JSON POST goes (http or https).
    url: str
    #: Signs every body: ``x-modelgate-signature: sha256=<hex HMAC-SHA256(body, secret)>``.
    secret: str = Field(min_length=16)
    #: The events this webhook receives (default: all of them).
    events: list[Event] = Field(default_factory=lambda: list(EVENTS))
    #: ``slack``: a Slack incoming-webhook body (``{"text": …}``) instead of the JSON event.
    format: Literal["json", "slack"] = "json"

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value) > 2000:
            raise ValueError("must be an http:// or https:// URL")
        return value


class AlertsConfig(_Section):
    webhooks: list[WebhookConfig] = Field(default_factory=list)
    #: ``balance.low`` below this balance (µc) for accounts without a threshold of their own
    #: (None: only accounts with their own threshold alert).
    low_balance_uc: int | None = Field(None, ge=0)
    #: ``cap.threshold`` at these percentages of a key's spend limit.
    cap_levels: list[int] = Field(default_factory=lambda: [80, 100])
    #: ``key.expiring`` this many days ahead of a key's ``expires_at``.
    key_expiring_days: float = Field(7.0, gt=0, le=365)
    #: ``upstream.down``: at most one alert per deployment in a window of this many seconds.
    upstream_down_window_seconds: float = Field(300.0, ge=1)
    #: Alerts waiting to be delivered by this process at most; past it new ones are dropped
    #: (counted in ``modelgate_alert_drops``).
    queue_size: int = Field(1000, ge=1, le=1_000_000)
    #: Attempts per delivery (the first included) before it is given up.
    max_attempts: int = Field(6, ge=1, le=100)
    #: First retry after this many seconds, doubling each time up to ``max_backoff_seconds``.
    backoff_seconds: float = Field(1.0, gt=0, le=3600)
    max_backoff_seconds: float = Field(300.0, gt=0, le=86400)
    #: Seconds one POST may take.
    timeout_seconds: float = Field(10.0, gt=0, le=300)
    #: How often deployments (``upstream.down``), keys (``key.revoked``, ``key.expiring``) and
    #: accounts' thresholds are looked over.
    scan_interval_seconds: float = Field(10.0, gt=0, le=86400)
    #: A balance or cap found not crossed is looked at again after this many seconds at most.
    recheck_seconds: float = Field(2.0, gt=0, le=3600)

    @field_validator("cap_levels")
    @classmethod
    def _check_levels(cls, value: list[int]) -> list[int]:
        if not value or any(not 1 <= v <= 100 for v in value):
            raise ValueError("percentages from 1 to 100")
        return sorted(set(value))

"""Gateway configuration: one TOML file plus ``MODELGATE_*`` environment overrides.

Precedence: built-in defaults < config file (``--config`` or ``MODELGATE_CONFIG``) < environment.
Environment names map onto the file's keys with ``__`` between levels, e.g.
``MODELGATE_SERVER__PORT=9000`` or ``MODELGATE_DATABASE_URL=postgresql://…``; values are parsed as
JSON when they parse (numbers, booleans, lists) and taken as strings otherwise. Every problem is
reported at start with the dotted path of the offending key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from modelgate.addresses import NO_NETWORKS, AddressError, Networks, parse_networks
from modelgate.alerts.config import AlertsConfig
from modelgate.billing.input_bound import MediaRules
from modelgate.sso_config import SsoConfig
from modelgate.storage.base import DEFAULT_BATCH_WAIT_SECONDS, DEFAULT_POOL_SIZE
from modelgate.upstream.config import (
    DeploymentConfig,
    ProviderSettings,
    RoutingConfig,
    SimulatorConfig,
)
from modelgate.upstream.kinds import without_kind_tag
from modelgate.upstream.kinds.simulator import SimulatorProviderConfig

ENV_PREFIX = "MODELGATE_"
MIB = 1024 * 1024
#: The most serving processes one ``modelgate serve`` runs.
MAX_WORKERS = 256


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    #: Requests larger than this get 413 (checked while reading, chunked uploads too).
    max_body_bytes: int = Field(32 * MIB, ge=1024)
    #: Protective limiter: requests in flight on this instance before fast 429s.
    max_in_flight: int = Field(2048, ge=1)
    #: Seconds a 429 from the protective limiter asks clients to wait.
    overload_retry_after: int = Field(1, ge=1)
    access_log: bool = False
    #: Open connections per instance; a connection beyond it gets a JSON 503 and is closed.
    max_connections: int = Field(10_000, ge=1)
    #: Seconds to receive a request's head (request line and headers), counted from the
    #: connection's start or the end of the previous response; then a JSON 408 and close.
    header_timeout_seconds: float = Field(10.0, gt=0)
    #: Seconds to receive a whole request body once its head arrived; then a JSON 408 and close.
    body_timeout_seconds: float = Field(60.0, gt=0)
    #: Seconds an idle keep-alive connection is kept between requests (announced in a
    #: ``Keep-Alive: timeout=`` header). Longer than the usual 60 s idle timeout of load balancers
    #: and the pools of common clients, so a reused connection is not closed under a request.
    keep_alive_seconds: float = Field(65.0, gt=0)
    #: On SIGTERM: seconds requests in flight may still run before streams are ended in-band.
    shutdown_grace_seconds: float = Field(30.0, ge=0)
    #: Bodies larger than this are parsed, checked and translated in worker processes, never on
    #: the event loop (``body_workers`` of them); smaller bodies are handled inline.
    offload_body_bytes: int = Field(256 * 1024, ge=1024)
    body_workers: int = Field(2, ge=1, le=64)
    #: Large bodies (above ``offload_body_bytes``) held at once; beyond it: a fast 429.
    max_large_bodies: int = Field(8, ge=1)
    #: Deepest JSON nesting accepted in a request body (400 "nested too deeply" beyond).
    max_json_depth: int = Field(128, ge=8, le=512)
    #: Serving processes on the one port (``auto``: one per core this process may run on). With
    #: more than one, a parent process supervises them (``server.workers`` in docs/operations.md).
    workers: int | Literal["auto"] = Field(1)
    #: A worker that dies is restarted at once; one that dies again within 10 s of its start waits
    #: 0.5 s, then twice as long for each further quick death, up to this many seconds.
    worker_restart_max_delay_seconds: float = Field(30.0, ge=0)
    #: CIDRs of the reverse proxies in front of the gateway. A request whose connection comes from
    #: one of them has its client address taken from ``X-Forwarded-For`` (the right-most address
    #: that is not a trusted proxy); from anywhere else the header is ignored. Used by keys'
    #: ``allowed_ips``. Empty: the socket's address always.
    trusted_proxies: list[str] = Field(default_factory=list)
    #: Niceness the body workers add to the server's (0-19): the serving loop wins the CPU from
    #: them, so small requests keep their latency while large bodies are parsed on the same cores.
    body_worker_niceness: int = Field(10, ge=0, le=19)
    #: ``idle``: the body workers run only on CPU time nothing else wants (Linux ``SCHED_IDLE``):
    #: a serving process that wakes takes the core from them at once, so small requests keep
    #: their latency beside large bodies; but a worker kept busy without pause beside a task that
    #: never sleeps gets well under 1 % of that core. ``niceness``: they take a share of a busy
    #: core by ``body_worker_niceness`` alone (about a tenth at 10), and small requests wait
    #: behind them more often. Elsewhere than Linux both are ``niceness``.
    body_worker_priority: Literal["idle", "niceness"] = "idle"
    #: Shared memory each body worker keeps between jobs (its arena, ``modelgate.offload``): a
    #: body or result up to this size is copied into pages already there; a larger one grows the
    #: arena for its job, and the excess is given back when the job ends. 0 keeps none.
    body_arena_bytes: int = Field(8 * MIB, ge=0, le=1024 * MIB)
    _trusted_networks: Networks = PrivateAttr(default=NO_NETWORKS)

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split_trusted_proxies(cls, value: object) -> object:
        # MODELGATE_SERVER__TRUSTED_PROXIES=10.0.0.0/8,192.168.0.0/16 (a JSON list works too)
        return [part for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: list[str]) -> list[str]:
        try:
            return list(parse_networks(value))
        except AddressError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _compile_trusted_proxies(self) -> ServerConfig:
        self._trusted_networks = Networks.compile(self.trusted_proxies)
        return self

    @property
    def trusted_networks(self) -> Networks:
        """``trusted_proxies`` compiled once, for the per-request client address."""
        return self._trusted_networks

    @field_validator("workers")
    @classmethod
    def _check_workers(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_WORKERS:
            raise ValueError(f'must be between 1 and {MAX_WORKERS}, or "auto"')
        return value

    @property
    def worker_count(self) -> int:
        """``workers`` as a number: ``auto`` is the cores this process may run on."""
        if self.workers == "auto":
            return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))
        return self.workers


class KeysConfig(_Section):
    #: Default requests per minute of new keys.
    default_rpm: int = Field(60, ge=1)
    #: Seconds the old secret keeps working after a rotation (0: stops at once).
    rotation_grace_seconds: float = Field(86400.0, ge=0)
    #: How often the in-memory key view polls the database for changes (revocations show within).
    refresh_interval: float = Field(0.25, gt=0, le=1.0)


class BillingConfig(_Section):
    #: A reservation older than this is treated as abandoned by a crashed request and released.
    reservation_ttl_seconds: float = Field(1800.0, ge=60)
    sweep_interval_seconds: float = Field(30.0, gt=0)
    #: Upper bound on input tokens added to the body size for every request (the prompt's own
    #: start and end; the body's JSON framing covers each message's).
    input_overhead_tokens: int = Field(128, ge=0)
    #: Added on top for a request that offers tools or asks for structured output (the prompt a
    #: provider adds for them).
    tool_overhead_tokens: int = Field(1024, ge=0)
    #: Usage records of refused requests (402/404/429) written in the background at most at once;
    #: past it a refusal is still answered, logged and counted in metrics, but not recorded, so a
    #: client hammering past its limit cannot queue writes without bound.
    max_pending_refusal_records: int = Field(1000, ge=0)
    #: Tokens held for an image whose size the gateway cannot read (by URL or file id, unreadable).
    tokens_per_image_url: int = Field(1600, ge=0)
    #: Inline images are held at ceil(pixels / image_pixels_per_token) + image_base_tokens; the
    #: default is denser than any provider rule the gateway ships for (Anthropic: 750 px/token).
    image_pixels_per_token: int = Field(400, ge=1)
    image_base_tokens: int = Field(100, ge=0)
    #: Inline PDFs are held at pages x tokens_per_pdf_page (text plus the page image);
    #: ``pdf_pages_when_unknown`` pages for a PDF by URL or file id, or whose page tree is unreadable.
    tokens_per_pdf_page: int = Field(3000, ge=0)
    pdf_pages_when_unknown: int = Field(100, ge=0)
    #: Server web searches (priced per request) a hold covers for a request that offers a web
    #: search tool; a tool's lower ``max_uses`` wins. 0 holds nothing for them.
    max_web_searches_per_request: int = Field(10, ge=0, le=10_000)
    #: Where settles the database could not take wait, fsynced, until they land (a file per
    #: process; replayed at start). Default: ``<data_dir>/settle-journal``.
    settle_journal_dir: Path | None = None
    #: Seconds a settle's first attempt at the database gets; a database that has not answered by
    #: then has the settle journaled and retried in the background (the answer is not held up).
    settle_timeout_seconds: float = Field(2.0, gt=0, le=60)

    def media_rules(self) -> MediaRules:
        return MediaRules(
            overhead_tokens=self.input_overhead_tokens,
            tool_overhead_tokens=self.tool_overhead_tokens,
            unknown_image_tokens=self.tokens_per_image_url,
            image_pixels_per_token=self.image_pixels_per_token,
            image_base_tokens=self.image_base_tokens,
            tokens_per_pdf_page=self.tokens_per_pdf_page,
            unknown_pdf_pages=self.pdf_pages_when_unknown,
        )


class AdminConfig(_Section):
    """The admin API and the dashboard (docs/admin-api.md)."""

    #: An admin token's ``last_used_at`` is written at most this often (seconds), so admin
    #: authentication stays a read.
    token_last_used_resolution_seconds: float = Field(60.0, ge=1, le=86400)
    #: Records one CSV export may hold; a filter matching more is refused with 400.
    csv_max_rows: int = Field(100_000, ge=1, le=10_000_000)
    #: How often each serving process checks the database for providers, deployments, aliases
    #: and prices changed through the admin API (seconds; docs/upstreams.md).
    upstreams_refresh_seconds: float = Field(0.25, gt=0, le=1.0)
    #: How long a usage report's ETag is taken as current without reading the report again: a
    #: request whose If-None-Match names the tag the same caller got for the same URL less than
    #: this long ago is answered 304 at once (a polling dashboard sees new usage at most this
    #: late; requests without If-None-Match always read). 0: every request reads (seconds).
    report_recheck_seconds: float = Field(2.0, ge=0, le=60)


class MetricsConfig(_Section):
    """Prometheus metrics (docs/operations.md#metrics)."""

    #: Serve ``GET /metrics`` on the main port.
    enabled: bool = True
    #: When set, the main port's ``/metrics`` requires ``Authorization: Bearer <token>``.
    token: str = ""
    #: Also serve ``/metrics`` (without a token) on this port of ``host``; 0 = off.
    port: int = Field(0, ge=0, le=65535)
    host: str = "127.0.0.1"
    #: Add a ``key_id`` label to the request, token and spend series (one series per key).
    per_key: bool = False
    #: Export each account's available balance (``modelgate_account_available_microcredits``).
    account_balances: bool = True

    @model_validator(mode="after")
    def _check_token(self) -> MetricsConfig:
        if self.token and len(self.token) < 16:
            raise ValueError("metrics.token: use at least 16 characters")
        return self


class OtelConfig(_Section):
    """OpenTelemetry traces (``pip install 'modelgate[otel]'``; docs/operations.md#traces)."""

    #: OTLP/HTTP collector, e.g. ``http://127.0.0.1:4318``; empty = tracing off.
    endpoint: str = ""
    service_name: str = "modelgate"
    #: Share of new traces recorded (a client's sampled ``traceparent`` is always followed).
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    #: Extra headers for the collector (e.g. an authorization header).
    headers: dict[str, str] = Field(default_factory=dict)


class ResponsesConfig(_Section):
    """Stored Responses state: ``store``, ``previous_response_id``, ``item_reference`` and
    conversations (docs/wire-formats.md, "Stored responses and conversations")."""

    #: ``on``: keep responses and conversations in the database; ``off``: keep nothing, and
    #: stateful fields are a 400 wherever no upstream keeps the state itself.
    store: Literal["on", "off"] = "on"
    #: Days a stored response or conversation is kept after it was written (a conversation:
    #: after it was last added to); then it is swept.
    ttl_days: float = Field(30.0, gt=0, le=3650)
    #: Largest stored response (its input and output items) or conversation addition, in bytes.
    #: A request whose own input is larger is refused when it asks to be stored.
    max_object_bytes: int = Field(32 * MIB, ge=1024)
    #: Bytes one account may keep in stored responses and conversations.
    max_account_bytes: int = Field(1024 * MIB, ge=1024)
    #: How old (seconds) an account's stored byte count may be when a request asking to be stored
    #: is let through; a refusal always reads it again (``limits.stored_room``). 0: read every time.
    room_check_max_age_seconds: float = Field(1.0, ge=0, le=60)
    #: Most responses a ``previous_response_id`` chain is followed back through (at most 10,000:
    #: each one is a parameter of the query that pages the chain's items).
    max_chain_depth: int = Field(1000, ge=1, le=10_000)
    #: How often expired objects are deleted (seconds).
    sweep_interval_seconds: float = Field(600.0, gt=0)
    #: Serve ``GET /v1/responses`` upgraded to a WebSocket (Responses WebSocket mode, as Codex
    #: speaks it). Off: the upgrade is answered 426, so clients fall back to HTTP.
    websocket: bool = True
    #: Seconds a socket may wait for its next ``response.create`` (none in flight); then it is
    #: closed with code 1000.
    websocket_idle_timeout_seconds: float = Field(300.0, gt=0)
    #: Seconds a socket may live; it is closed (code 1000) once its response in flight ended.
    websocket_max_connection_seconds: float = Field(3600.0, gt=0)
    #: Largest message a client may send on a socket; a larger one closes it with code 1009.
    websocket_max_message_bytes: int = Field(32 * MIB, ge=1024)
    #: Messages a client may send ahead while a response is in flight; one more closes the
    #: socket with code 1008 (the response in flight is ended as a disconnect).
    websocket_max_pending_messages: int = Field(4, ge=1, le=1024)
    #: Seconds between the server's keep-alive pings; a pong must come within as many (0: off).
    websocket_ping_interval_seconds: float = Field(20.0, ge=0)
    #: Write a stored answer after it is sent (off its latency path): ``on``; ``off``: before it
    #: is sent; ``auto``: ``on`` when this one process serves the database (SQLite and
    #: ``server.workers = 1``), so no other process can be asked for the response before its
    #: write has committed (``storage.deferred_responses``).
    keep_after_answer: Literal["auto", "on", "off"] = "auto"
    #: Seconds stored answers written after their answer gather before they are written together
    #: (one transaction for all; 0: each at once). A read of the account writes them at once.
    keep_batch_seconds: float = Field(0.005, ge=0, le=1)


class UsageConfig(_Section):
    """Usage records and their rollups (docs/operations.md, "Usage history")."""

    #: Days a raw usage record is kept after its request started; older ones are deleted in
    #: small batches. 0: kept forever. The rollups (totals, daily charts, top keys) are kept.
    retention_days: int = Field(0, ge=0, le=36_500)
    #: How often old records are looked for and deleted (seconds).
    retention_interval_seconds: float = Field(3600.0, gt=0)
    #: Records deleted per transaction (each batch a short write between ledger commits).
    retention_batch: int = Field(1000, ge=1, le=100_000)


class Settings(_Section):
    data_dir: Path = Path("data")
    #: ``sqlite:///…`` (default: ``<data_dir>/modelgate.db``) or ``postgresql://…``.
    database_url: str | None = None
    #: PostgreSQL only: the most connections each serving process opens (two of them are kept
    #: by the ledger's and the stored answers' batchers; the rest serve every other query).
    database_pool_size: int = Field(DEFAULT_POOL_SIZE, ge=3, le=1000)
    #: PostgreSQL only: under load (writes arriving faster than one per this), how long a batch
    #: of ledger writes or stored answers waits for company before it leaves (0: never waits).
    database_batch_wait_seconds: float = Field(DEFAULT_BATCH_WAIT_SECONDS, ge=0, le=0.1)
    #: SQLite only: below this much free space on the database's disk, ``/health`` answers 503
    #: and new requests are refused (503 in their format) while requests under way still settle.
    database_min_free_bytes: int = Field(16 * MIB, ge=0)
    #: ``redis://…`` to share rate-limit windows and revocations between instances.
    redis_url: str | None = None
    #: How long one Redis call (rate-limit tickets) may take before the instance falls back to its
    #: own buckets for a while (``docs/scale-out.md``).
    redis_timeout_seconds: float = Field(1.0, gt=0, le=30)
    #: HMAC secret for key digests; default: generated once into ``<data_dir>/secret``.
    secret: str | None = None
    #: Accepted values of the ``alpha-version`` / ``anthropic-version`` header.
    api_versions: list[str] = Field(default_factory=lambda: ["2023-06-01", "2026-10-21"])
    server: ServerConfig = ServerConfig()
    simulator: SimulatorConfig = SimulatorConfig()
    keys: KeysConfig = KeysConfig()
    billing: BillingConfig = BillingConfig()
    admin: AdminConfig = AdminConfig()
    responses: ResponsesConfig = ResponsesConfig()
    routing: RoutingConfig = RoutingConfig()
    providers: list[ProviderSettings] = Field(
        default_factory=lambda: list[ProviderSettings](
            [SimulatorProviderConfig(name="simulator", kind="simulator")]
        )
    )
    #: Model id -> deployments. Models absent here go to ``default_provider``.
    deployments: dict[str, list[DeploymentConfig]] = Field(default_factory=dict)
    #: Provider serving every catalogue model without explicit deployments ("" = none).
    default_provider: str = "simulator"
    #: With ``default_provider = ""``, what a catalogue model without deployments means:
    #: ``error`` stops the start naming those models; ``hide`` removes them (and aliases to
    #: them) from the served catalogue, so they are listed nowhere and requests get 404.
    #: Either way no model is routed nowhere at request time.
    unrouted: Literal["error", "hide"] = "error"
    #: Overrides of the packaged catalogue: ``models``, ``aliases``, ``default_max_output_tokens``.
    catalogue: dict[str, Any] = Field(default_factory=dict)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: ``json`` (one object per line) or ``text``; default: text on a terminal, JSON otherwise.
    log_format: Literal["json", "text"] | None = None
    #: One log record per model request at its end (logger ``modelgate.requests``).
    request_log: bool = True
    metrics: MetricsConfig = MetricsConfig()
    otel: OtelConfig = OtelConfig()
    #: OpenID Connect sign-in for the dashboard and admin API (docs/people.md).
    sso: SsoConfig = SsoConfig()
    alerts: AlertsConfig = AlertsConfig()
    usage: UsageConfig = UsageConfig()

    @model_validator(mode="after")
    def _check_default_provider(self) -> Settings:
        names = {p.name for p in self.providers}
        if self.default_provider and self.default_provider not in names:
            first = self.providers[0].name if self.providers else "my-provider"
            raise ValueError(
                f"default_provider: {self.default_provider!r} is not a configured provider "
                f"(configured: {', '.join(sorted(names)) or 'none'}). Set one at the top of the config "
                f'file: default_provider = "{first}" serves every model without [deployments] from it, '
                'or default_provider = "" serves only the models named under [deployments]; '
                'or keep the simulator with a [[providers]] table holding name = "simulator" and kind = "simulator"'
            )
        return self

    @model_validator(mode="after")
    def _check_worker_metrics_ports(self) -> Settings:
        last = self.metrics.port + self.server.worker_count - 1
        if self.metrics.port and last > 65535:
            raise ValueError(
                f"metrics.port: with {self.server.worker_count} workers, worker i serves metrics on "
                f"metrics.port + i, and {last} is not a port"
            )
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'modelgate.db'}"


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "CONFIG":
            continue
        if name.startswith(ENV_PREFIX + "TEST_"):  # the test harness's (scripts/services.sh)
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        try:
            value: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = raw
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in without_kind_tag(err["loc"])) or "(top level)"
        lines.append(f"{where}: {err['msg']}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def load_settings(
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Defaults, then the file, then ``MODELGATE_*``, then explicit ``overrides`` (CLI flags)."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(ENV_PREFIX + "CONFIG"):
        path = Path(environ[ENV_PREFIX + "CONFIG"])
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text("utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
    data = _merge(data, _env_overrides(environ))
    data = _merge(data, {k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc

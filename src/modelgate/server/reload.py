"""SIGHUP: read the configuration file again and apply what can change under live traffic.

A reload never cuts a request: the new file is loaded and validated first (the same checks as at
start: the TOML, every setting, the catalogue, deployments and providers); a file that fails them
changes nothing, and the error is logged with the running configuration kept. A valid file is
compared key by key with the running configuration:

- the keys in ``LIVE`` are applied at once: requests that start afterwards see them, requests in
  flight finish with what they started with (a rebuilt catalogue and router replace the old ones;
  the old providers' connections are closed once no request uses them any more);
- every other key (listen address, workers, database, secret, timeouts of the connection layer,
  sweepers, telemetry...) needs a restart: its running value is kept, and the log line names it.

docs/operations.md ("Reloading the configuration") lists the same sets for operators.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelgate.config import ConfigError, Settings, load_settings
from modelgate.liveconfig.routing import check_routing
from modelgate.services import Services
from modelgate.sso_config import client_secret
from modelgate.telemetry.logs import scrub_also

log = logging.getLogger("modelgate.reload")

#: Top-level keys that rebuild the catalogue and the router when they change.
ROUTING = frozenset(
    {"catalogue", "providers", "deployments", "default_provider", "unrouted", "routing", "simulator"}
)
#: Every key a reload applies live (dotted below a section). Everything else needs a restart.
LIVE = ROUTING | {
    "log_level",
    "api_versions",
    "server.max_body_bytes",
    "server.max_json_depth",
    "server.offload_body_bytes",
    "server.max_in_flight",
    "server.max_large_bodies",
    "server.overload_retry_after",
    "keys.rotation_grace_seconds",
    "keys.default_rpm",
    "billing.input_overhead_tokens",
    "billing.tool_overhead_tokens",
    "billing.max_pending_refusal_records",
    "billing.tokens_per_image_url",
    "billing.image_pixels_per_token",
    "billing.image_base_tokens",
    "billing.tokens_per_pdf_page",
    "billing.pdf_pages_when_unknown",
    "billing.max_web_searches_per_request",
    "responses.ttl_days",
    "responses.max_object_bytes",
    "responses.max_account_bytes",
    "responses.max_chain_depth",
    "metrics.token",
    "metrics.account_balances",
    "alerts",
    "sso",
}
#: Sections compared key by key (the others, ``routing`` and ``simulator`` included, as a whole).
SECTIONS = frozenset({"server", "keys", "billing", "admin", "responses", "metrics", "otel"})


@dataclass(frozen=True)
class ConfigSource:
    """Where the running configuration came from: the file (or ``MODELGATE_CONFIG``), the
    environment at start, and the command line's overrides, which a reload keeps."""

    path: Path | None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> Settings:
        return load_settings(self.path, **dict(self.overrides))

    def describe(self) -> str:
        path = self.path or os.environ.get("MODELGATE_CONFIG")
        return str(path) if path else "(no configuration file: defaults and MODELGATE_* only)"


@dataclass(frozen=True)
class Changes:
    applied: list[str]
    #: Changed keys whose running value is kept until a restart.
    ignored: list[str]
    settings: Settings

    @property
    def routing(self) -> bool:
        return any(key in ROUTING for key in self.applied)


def _flat(settings: Settings) -> dict[str, Any]:
    dumped = settings.model_dump(mode="json")
    out: dict[str, Any] = {}
    for name, value in dumped.items():
        if name in SECTIONS and isinstance(value, dict):
            out.update({f"{name}.{key}": inner for key, inner in value.items()})
        else:
            out[name] = value
    return out


def compare(running: Settings, new: Settings) -> Changes:
    """What differs, split into what a reload applies and what waits for a restart; ``settings``
    is the running configuration with the live keys taken from ``new``."""
    before, after = _flat(running), _flat(new)
    changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    applied = [key for key in changed if key in LIVE]
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key in applied:
        section, _, name = key.partition(".")
        if name:
            sections.setdefault(section, {})[name] = getattr(getattr(new, section), name)
        else:
            top[key] = getattr(new, key)
    for section, values in sections.items():
        top[section] = getattr(running, section).model_copy(update=values)
    settings = running.model_copy(update=top) if top else running
    return Changes(applied, [key for key in changed if key not in LIVE], settings)


def load_checked(
    source: ConfigSource, running: Settings, adjust: Callable[[Settings], Settings] | None = None
) -> Changes:
    """The new file, validated as at start, compared with ``running``; ConfigError if unusable."""
    new = source.load()
    if adjust is not None:
        new = adjust(new)
    changes = compare(running, new)
    if changes.routing:
        check_routing(changes.settings, os.environ)
    check_sections(changes)
    return changes


def check_sections(changes: Changes) -> None:
    """What a changed ``[sso]`` needs beyond the file, checked as at start: the environment
    variable holding the client secret (ConfigError, naming it, when it is not set)."""
    if "sso" in changes.applied:
        try:
            client_secret(changes.settings.sso, os.environ)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def describe(changes: Changes) -> str:
    applied = ", ".join(changes.applied) or "nothing"
    text = f"applied: {applied}"
    if changes.ignored:
        text += f"; needs a restart (running value kept): {', '.join(changes.ignored)}"
    return text


def set_log_level(level: str) -> None:
    logging.getLogger().setLevel(level.upper())


class Reloader:
    """Reloads one serving process (``modelgate serve``, or one worker of ``--workers``)."""

    def __init__(
        self,
        services: Services,
        source: ConfigSource,
        *,
        adjust: Callable[[Settings], Settings] | None = None,
    ) -> None:
        self._services = services
        self._source = source
        #: What the process changes in the file's settings (a worker's own ``metrics.port``).
        self._adjust = adjust
        self._running: asyncio.Task[None] | None = None
        self._again = False

    def request(self) -> None:
        """Reload soon (on the serving loop); a SIGHUP during a reload runs one more after it."""
        if self._services.drain.active:
            log.warning("SIGHUP while stopping: not reloading %s", self._source.describe())
            return
        if self._running is not None and not self._running.done():
            self._again = True
            return
        self._running = asyncio.get_running_loop().create_task(self._reload())

    async def _reload(self) -> None:
        while True:
            self._again = False
            await self.reload_now()
            if not self._again:
                return

    async def reload_now(self) -> Changes | None:
        """Apply the file's live settings; None (nothing changed) if it cannot be used.

        Reading and comparing run in a worker thread, and so do validating and building the new
        routing (credentials resolved, possibly over HTTP from a cloud metadata service;
        ``liveconfig.live``, with the providers, deployments, aliases and prices stored through
        the admin API laid over the file's): the serving loop only swaps the result in."""
        where = self._source.describe()
        services = self._services
        try:
            changes = await asyncio.to_thread(self._prepare, services.settings)
            if services.drain.active:
                log.warning("stopping: the reload of %s is not applied", where)
                return None
            if changes.routing and services.live is not None:
                await services.live.rebuild(changes.settings)
        except ConfigError as exc:
            log.error("reload of %s failed; still serving with the running configuration: %s", where, exc)
            return None
        except Exception as exc:  # anything else a provider's construction raises: same answer
            log.exception("reload of %s failed; still serving with the running configuration: %s", where, exc)
            return None
        services.settings = changes.settings
        if "alerts" in changes.applied:
            await services.reload_alerts()
        server = changes.settings.server
        services.inflight.limit = server.max_in_flight
        services.large_bodies.limit = server.max_large_bodies
        set_log_level(changes.settings.log_level)
        scrub_also((changes.settings.metrics.token,))
        log.warning("reloaded %s: %s", where, describe(changes))
        return changes

    def _prepare(self, running: Settings) -> Changes:
        """In a worker thread: the new file compared with ``running``."""
        new = self._source.load()
        if self._adjust is not None:
            new = self._adjust(new)
        changes = compare(running, new)
        check_sections(changes)
        return changes

    async def stop(self) -> None:
        """At shutdown: nothing of the reloader's own runs on (replaced routers are closed by
        ``liveconfig.live`` when the services stop)."""


def on_hangup(loop: asyncio.AbstractEventLoop, reloader: Reloader) -> Callable[[int, Any], None]:
    """A ``signal.signal`` handler that hands the reload to ``loop``."""

    def handler(signum: int, frame: Any) -> None:
        if not loop.is_closed():  # after the server stopped there is nothing to reload
            loop.call_soon_threadsafe(reloader.request)

    return handler

"""Choose a deployment for a model, call it, and retry or fail over until a 2xx reply is open.

Invariant: retries happen only inside ``Router.open``, i.e. before the first byte reaches the
client. ``open`` returns an ``Attempt`` whose reply has a 2xx status and an unread body; from
then on nothing is retried (a failure mid-stream becomes the format's in-band error event).

Per attempt: weighted random choice among deployments not cooling down (preferring ones not yet
tried by this request; if every deployment is cooling, the one whose cooldown ends first, so
nothing is refused while something could work; a request with a session key, when
``routing.affinity = "session"``, goes to its session's pin instead while that one is usable, or
else by weighted rendezvous hashing: ``upstream.affinity``) -> ``build`` the body for that
deployment's dialect -> send. Connect failures, timeouts before the headers, and 429/500/502/503/504/529 are
retried (subject to ``max_attempts`` and the retry budget) after a full-jitter backoff, or after
the upstream's ``retry-after`` when retrying the same deployment and it is within the cap. Other
4xx are the request's fault: relayed at once, never retried.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from modelgate import errors
from modelgate.upstream.affinity import (
    STEER,
    AffinityTable,
    Pin,
    Steer,
    deployment_name,
    ranked,
    salt,
)
from modelgate.upstream.affinity_key import SessionKey, session_key
from modelgate.upstream.base import (
    ConnectFailed,
    ConnectionCounts,
    CredentialStatus,
    Deployment,
    Dialect,
    JudgesCredentials,
    Provider,
    Redacts,
    ReportsConnections,
    ReportsCredentials,
    UpstreamReply,
)
from modelgate.upstream.config import RoutingConfig
from modelgate.upstream.error_mapping import (
    RETRYABLE_STATUSES,
    Failure,
    UpstreamError,
    client_error,
    credentials_rejected,
    give_up_error,
    parse_error_body,
    retry_after_seconds,
    sanitise,
)
from modelgate.upstream.health import DeploymentHealth, RetryBudget

log = logging.getLogger("modelgate.upstream")

#: Returns the dialect and request body for one attempt on a deployment (a coroutine: a large
#: body is built in a worker process).
BuildRequest = Callable[[Deployment, Provider], Awaitable[tuple[Dialect, bytes]]]

#: An error body is read only to extract its message; a stalled one must not hold a retry up.
_ERROR_BODY_TIMEOUT = 5.0

#: Why an attempt is made: the request's first, after a failure on the same deployment, or after
#: a failure moved to another deployment.
AttemptReason = Literal["first", "retry", "failover"]


class AttemptObserver(Protocol):
    """Watches one request's attempts (metrics, the request log, trace spans). Optional."""

    def attempt_started(
        self, deployment: Deployment, provider: Provider, number: int, reason: AttemptReason
    ) -> Mapping[str, str] | None:
        """An attempt is about to be sent; returns headers to add to it (trace context) or None."""
        ...

    def attempt_ended(self, error: str | None, status: int | None) -> None:
        """The attempt's response head came (``status``) or it failed; ``error`` is its class
        (``ERROR_CLASSES``), None for a 2xx."""
        ...


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


class _Arrived(Protocol):
    @property
    def headers(self) -> Mapping[str, str]: ...


class _Analysed(Protocol):
    @property
    def body(self) -> Mapping[str, Any]: ...

    @property
    def session_hint(self) -> bytes | None: ...


class RoutedRequest(Protocol):
    """What ``Router.session_of`` reads of an admitted request (``gateway.pipeline.Admitted``):
    its model, its gateway key, its headers and its analysed body."""

    @property
    def model(self) -> _Identified: ...

    @property
    def key(self) -> _Identified: ...

    @property
    def exchange(self) -> _Arrived: ...

    @property
    def facts(self) -> _Analysed: ...


#: Classes of failed attempts (the ``class`` label of ``modelgate_upstream_errors``).
ERROR_CLASSES = (
    "connect",
    "timeout",
    "broken",
    "credentials",
    "rate_limited",
    "overloaded",
    "server_error",
    "request_rejected",
    "bad_status",
    "abandoned",
    "mid_stream",
)


def failure_class(failure: Failure) -> str:
    if failure.kind != "status":
        return failure.kind
    if failure.status == 429:
        return "rate_limited"
    return "overloaded" if failure.overloaded else "server_error"


def raised_class(exc: BaseException) -> str:
    """The class of an attempt that ended by raising: an upstream refusal of the request (4xx),
    an unusable status, or abandoned (the request was cancelled while waiting)."""
    if isinstance(exc, errors.GatewayError):
        status = exc.http_status()
        return "request_rejected" if exc.from_upstream and 400 <= status < 500 else "bad_status"
    return "abandoned"


@dataclass(frozen=True, slots=True)
class Attempt:
    """The successful attempt: the reply is 2xx and unread; the caller must close it."""

    deployment: Deployment
    provider: Provider
    dialect: Dialect
    reply: UpstreamReply
    #: How many attempts ``open`` made, this one included.
    attempts: int = 1
    #: Report that the reply broke after it was opened (mid-stream): a deployment that breaks its
    #: streams must cool down like one that refuses them.
    report_failure: Callable[[], None] = lambda: None
    #: Report that a stream ran to its end: its deployment's failures are forgiven only then (a
    #: 2xx head alone says nothing about a stream, so it neither clears nor adds a failure).
    report_success: Callable[[], None] = lambda: None


@dataclass(frozen=True, slots=True)
class DeploymentStatus:
    """A deployment's health as reported on ``/health``."""

    model: str
    provider: str
    upstream_model: str
    consecutive_failures: int
    cooling_for: float


class Router:
    def __init__(
        self,
        providers: Mapping[str, Provider],
        deployments: Mapping[str, Sequence[Deployment]],
        config: RoutingConfig,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        for model, deps in deployments.items():
            for dep in deps:
                if dep.provider not in providers:
                    raise ValueError(f"deployments[{model!r}]: unknown provider {dep.provider!r}")
        self._providers = dict(providers)
        self._deployments = {model: tuple(deps) for model, deps in deployments.items()}
        self._config = config
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._sleep = sleep
        self._health = DeploymentHealth(
            cooldown=config.cooldown, failures_to_cooldown=config.failures_to_cooldown, clock=clock
        )
        self._budget = RetryBudget(
            ratio=config.retry_budget_ratio,
            min_per_second=config.retry_budget_min_per_second,
            window=config.retry_budget_window,
            clock=clock,
        )
        self._affinity = (
            AffinityTable(config.affinity_ttl_seconds, config.affinity_max_sessions, clock)
            if config.affinity == "session"
            else None
        )
        #: Rendezvous salts of the deployments (``upstream.affinity.ranked``).
        self._salts = {d: salt(deployment_name(d)) for deps in self._deployments.values() for d in deps}
        #: Models with a choice to make (several deployments, or a pool of credentials): only
        #: their requests get a session key and a pin.
        self._steered = frozenset(
            model
            for model, deps in self._deployments.items()
            if len(deps) > 1 or any(_credentials(self._providers[d.provider]) > 1 for d in deps)
        )
        #: Exchanges using this router now (``acquire`` .. ``release``): a router a reload
        #: replaced is closed once this is 0 (``server.reload``), never under a live upstream call.
        self._uses = 0
        self._unused = asyncio.Event()
        self._unused.set()

    @property
    def health(self) -> DeploymentHealth:
        return self._health

    @property
    def providers(self) -> Mapping[str, Provider]:
        return self._providers

    def adopt(self, running: Router) -> None:
        """Carry on from ``running``, which this router replaces (a reload, a runtime change):
        its cooldowns (health is keyed by deployment, so an unchanged deployment keeps its own),
        retry budget and session pins, when the routing policy that shaped them is the same. A
        pin on a deployment this router does not have is never followed (``_place``)."""
        if running._config != self._config:
            return
        self._health = running._health
        self._budget = running._budget
        self._affinity = running._affinity

    @property
    def affinity(self) -> AffinityTable | None:
        """The session pins (None with ``routing.affinity = "off"``)."""
        return self._affinity

    @property
    def budget(self) -> RetryBudget:
        return self._budget

    def session_of(self, request: RoutedRequest) -> SessionKey | None:
        """A request's session key (``affinity_key.session_key``, scoped by its gateway key's
        id), or None (nothing hashed) with ``routing.affinity = "off"`` or when its model has a
        single deployment with a single credential: there is nothing to steer."""
        if self._affinity is None or request.model.id not in self._steered:
            return None
        facts = request.facts
        return session_key(request.key.id, request.exchange.headers, facts.body, facts.session_hint)

    def deployments_for(self, model: str) -> tuple[Deployment, ...]:
        return self._deployments.get(model, ())

    def provider_of(self, deployment: Deployment) -> Provider:
        return self._providers[deployment.provider]

    async def open(
        self,
        model: str,
        build: BuildRequest,
        *,
        stream: bool,
        client_headers: Mapping[str, str],
        path_suffix: str = "",
        observer: AttemptObserver | None = None,
        session: SessionKey | None = None,
    ) -> Attempt:
        """``session``: the request's session key (``affinity_key.session_key``), or None."""
        candidates = self._deployments.get(model)
        if not candidates:
            raise errors.Unavailable(f"no upstream deployment is configured for model {model}")
        self._budget.deposit()
        table = self._affinity
        steer = Steer(session) if session is not None and table is not None else None
        pin = table.get(model, steer.session) if steer is not None and table is not None else None
        tried: list[Deployment] = []
        last: Failure | None = None
        for attempt in range(1, self._config.max_attempts + 1):
            if steer is None:
                deployment = self._choose(candidates, tried)
            else:
                deployment = self._place(candidates, tried, steer, pin)
            if last is not None:
                same = deployment == tried[-1]
                if same and last.retry_after is not None and last.retry_after > self._config.retry_after_cap:
                    break  # the upstream asked for a longer pause than we hold a client for
                if last.kind == "credentials" and deployment in tried:
                    break  # our key for it was refused: only another deployment can help
                if not self._budget.try_withdraw():
                    break
                await self._sleep(self._delay(attempt - 1, last, same))
            reason: AttemptReason = (
                "first" if not tried else "retry" if deployment == tried[-1] else "failover"
            )
            tried.append(deployment)
            provider = self._providers[deployment.provider]
            dialect, body = await build(deployment, provider)
            headers = client_headers
            if observer is not None:
                extra = observer.attempt_started(deployment, provider, attempt, reason)
                if extra:
                    headers = {**client_headers, **extra}
            token = STEER.set(steer) if steer is not None else None
            try:
                outcome = await self._try(deployment, provider, dialect, body, stream, headers, path_suffix)
            except BaseException as exc:
                if observer is not None:
                    observer.attempt_ended(raised_class(exc), None)
                raise
            finally:
                if token is not None:
                    STEER.reset(token)
            if observer is not None:
                if isinstance(outcome, Failure):
                    observer.attempt_ended(failure_class(outcome), outcome.status)
                else:
                    observer.attempt_ended(None, outcome.status)
            if isinstance(outcome, Failure):
                # Everything logged here went through sanitise (no keys, no upstream address).
                log.warning(
                    "upstream attempt %d for model %s failed on %s/%s: %s",
                    attempt,
                    model,
                    deployment.provider,
                    deployment.upstream_model,
                    _describe(outcome),
                )
                last = outcome
                continue
            if steer is not None and table is not None:
                table.served(model, steer.session, pin, deployment, steer.served)
            return Attempt(
                deployment,
                provider,
                dialect,
                outcome,
                attempt,
                functools.partial(self._health.failed, deployment),
                functools.partial(self._health.succeeded, deployment) if stream else _no_verdict,
            )
        raise give_up_error(last, len(tried))

    async def _try(
        self,
        deployment: Deployment,
        provider: Provider,
        dialect: Dialect,
        body: bytes,
        stream: bool,
        client_headers: Mapping[str, str],
        path_suffix: str,
    ) -> UpstreamReply | Failure:
        """One attempt: a 2xx reply, a retryable ``Failure``, or a raised non-retryable error."""
        health = self._health
        health.begin(deployment)
        name = provider.name
        try:
            reply = await provider.send(
                dialect, body, stream=stream, client_headers=client_headers, path_suffix=path_suffix
            )
        except ConnectFailed as exc:
            health.failed(deployment)
            return Failure("connect", name, note=exc.message)
        except errors.UpstreamTimeout as exc:
            health.failed(deployment)
            return Failure("timeout", name, note=exc.message)
        except errors.UpstreamFailed as exc:
            health.failed(deployment)
            return Failure("broken", name, note=exc.message)
        except BaseException:
            health.abandoned(deployment)
            raise
        status = reply.status
        if 200 <= status < 300:
            if stream:
                health.abandoned(deployment)  # the verdict comes when the stream ends
            else:
                health.succeeded(deployment)
            return reply
        try:
            detail = await self._error_detail(provider, reply)
        except BaseException:
            health.abandoned(deployment)
            raise
        finally:
            await reply.close()
        if status in RETRYABLE_STATUSES:
            retry_after = retry_after_seconds(reply.headers)
            hold = min(retry_after, self._config.cooldown) if retry_after is not None else None
            health.failed(deployment, hold=hold)
            return Failure("status", name, status=status, detail=detail, retry_after=retry_after)
        if 400 <= status < 500:
            refused = (
                provider.credentials_rejected(status, detail)
                if isinstance(provider, JudgesCredentials)
                else credentials_rejected(status, detail)
            )
            if refused or status == 402:
                # Our key or account for this deployment is refused, not the request: another
                # deployment may serve it, and this one cools down at once (a key does not heal).
                health.failed(deployment, hold=self._config.cooldown)
                log.error(
                    "upstream %s rejected the gateway's credentials or account (HTTP %d): %s",
                    name,
                    status,
                    detail.message or "no message",
                )
                return Failure("credentials", name, status=status, detail=detail)
            health.succeeded(deployment)  # the upstream works; the request was refused
            raise client_error(status, detail, name, refused=refused)
        # 1xx/3xx/other 5xx: a misconfigured or broken upstream; another try will not help.
        health.failed(deployment)
        raise give_up_error(Failure("status", name, status=status, detail=detail), 1)

    async def _error_detail(self, provider: Provider, reply: UpstreamReply) -> UpstreamError:
        redact = provider.redact if isinstance(provider, Redacts) else sanitise
        try:
            async with asyncio.timeout(_ERROR_BODY_TIMEOUT):
                raw = await reply.read()
        except (errors.GatewayError, TimeoutError):
            return UpstreamError(None)
        return parse_error_body(raw, redact)

    def _choose(self, candidates: Sequence[Deployment], tried: Sequence[Deployment]) -> Deployment:
        available = [d for d in candidates if self._health.available(d)]
        pool = [d for d in available if d not in tried] or available
        if not pool:
            return min(candidates, key=self._health.available_at)
        if len(pool) == 1:
            return pool[0]
        return self._rng.choices(pool, weights=[d.weight for d in pool])[0]

    def _place(
        self, candidates: Sequence[Deployment], tried: Sequence[Deployment], steer: Steer, pin: Pin | None
    ) -> Deployment:
        """A session's deployment: its pin while usable (not cooling, not yet failed in this
        request), else its first choice by weighted rendezvous among the usable ones (the same
        fallbacks as ``_choose`` when none is). Sets the credential the pool should offer first."""
        health = self._health
        if (
            pin is not None
            and pin.deployment in candidates
            and pin.deployment not in tried
            and health.available(pin.deployment)
        ):
            chosen = candidates[list(candidates).index(pin.deployment)]  # this router's own
        else:
            available = [d for d in candidates if health.available(d)]
            pool = [d for d in available if d not in tried] or available
            if not pool:
                chosen = min(candidates, key=health.available_at)
            elif len(pool) == 1:
                chosen = pool[0]
            else:
                salts = [self._salts[d] for d in pool]
                chosen = pool[ranked(steer.session, salts, [d.weight for d in pool])[0]]
        steer.preferred = pin.credential if pin is not None and pin.deployment == chosen else None
        steer.served = None
        return chosen

    def _delay(self, retry: int, last: Failure, same: bool) -> float:
        if same and last.retry_after is not None:
            return last.retry_after
        ceiling = min(self._config.backoff_max, self._config.backoff_base * 2 ** (retry - 1))
        return self._rng.uniform(0.0, ceiling)

    def status(self) -> list[DeploymentStatus]:
        now = self._clock()
        return [
            DeploymentStatus(
                model,
                dep.provider,
                dep.upstream_model,
                self._health.consecutive_failures(dep),
                max(0.0, self._health.available_at(dep) - now),
            )
            for model, deps in self._deployments.items()
            for dep in deps
        ]

    def connection_counts(self) -> dict[str, ConnectionCounts]:
        """Each pooled provider's upstream connections now, by provider name."""
        return {
            name: provider.connection_counts()
            for name, provider in self._providers.items()
            if isinstance(provider, ReportsConnections)
        }

    def credential_status(self) -> list[CredentialStatus]:
        """Credentials out of rotation (refused or resting) across the providers' pools."""
        return [
            status
            for provider in self._providers.values()
            if isinstance(provider, ReportsCredentials)
            for status in provider.credential_status()
        ]

    def acquire(self) -> None:
        """An exchange starts using this router (before its upstream call or count)."""
        self._uses += 1
        self._unused.clear()

    def release(self) -> None:
        """That exchange is over (its stream ended, failed or was cut; its reply was read)."""
        self._uses -= 1
        if self._uses == 0:
            self._unused.set()

    @property
    def uses(self) -> int:
        return self._uses

    async def unused(self) -> None:
        """Returns once no exchange uses this router (at once if none does now)."""
        await self._unused.wait()

    async def aclose(self) -> None:
        """Close every provider (their connection pools)."""
        for provider in self._providers.values():
            await provider.aclose()


@runtime_checkable
class CountsCredentials(Protocol):
    """A provider with a credential pool (``HttpProvider``)."""

    def credential_count(self) -> int: ...


def _credentials(provider: Provider) -> int:
    return provider.credential_count() if isinstance(provider, CountsCredentials) else 0


def _no_verdict() -> None:
    return None


def _describe(failure: Failure) -> str:
    if failure.kind not in ("status", "credentials"):
        return failure.note
    message = failure.detail.message if failure.detail and failure.detail.message else "no message"
    return f"HTTP {failure.status}: {message}"

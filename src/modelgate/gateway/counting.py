"""``POST /v1/messages/count_tokens``: no credits spent.

Forwarded to a Messages-dialect upstream when every deployment of the model has one (its count is
the one that will be billed); otherwise counted locally with the gateway's one estimator
(``billing.estimate``), which is exact for the simulator and an estimate otherwise (documented).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from modelgate.errors import UpstreamFailed
from modelgate.upstream.base import Dialect
from modelgate.upstream.router import AttemptObserver, BuildRequest, Router


def upstream_counts(router: Router, model_id: str, dialect: Dialect) -> bool:
    """Whether every deployment of the model can count tokens itself: it speaks ``dialect``, the
    counting route's own format (Messages)."""
    deployments = router.deployments_for(model_id)
    return bool(deployments) and all(dialect in router.provider_of(d).dialects for d in deployments)


async def upstream_count(
    router: Router,
    model_id: str,
    build: BuildRequest,
    headers: Mapping[str, str],
    observer: AttemptObserver | None = None,
) -> int:
    """The upstream's ``input_tokens`` for the body ``build`` makes (Messages dialect)."""
    attempt = await router.open(
        model_id, build, stream=False, client_headers=headers, path_suffix="/count_tokens", observer=observer
    )
    try:
        data = orjson.loads(await attempt.reply.read())
    except orjson.JSONDecodeError as exc:
        raise UpstreamFailed("the upstream's token count is not JSON") from exc
    finally:
        await attempt.reply.close()
    count = data.get("input_tokens") if isinstance(data, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise UpstreamFailed("the upstream's token count has no input_tokens")
    return count

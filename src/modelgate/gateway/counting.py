"""``POST /v1/messages/count_tokens``: no credits spent.

Forwarded to a Messages-dialect upstream when every deployment of the model has one (its count is
the one that will be billed); otherwise counted locally with the gateway's one estimator
(``billing.estimate``), which is exact for the simulator and an estimate otherwise (documented).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from modelgate.billing.estimate import prompt_tokens
from modelgate.errors import UpstreamFailed
from modelgate.formats import ClientRequest
from modelgate.gateway.body import splice_top_level
from modelgate.upstream.router import Router


async def count_input_tokens(
    router: Router, model_id: str, client: ClientRequest, raw: bytes, headers: Mapping[str, str]
) -> int:
    deployments = router.deployments_for(model_id)
    if not deployments or not all("messages" in router.provider_of(d).dialects for d in deployments):
        return prompt_tokens(client.request())
    attempt = await router.open(
        model_id,
        lambda d, p: ("messages", splice_top_level(raw, {"model": d.upstream_model}, parsed=client.body)),
        stream=False,
        client_headers=headers,
        path_suffix="/count_tokens",
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

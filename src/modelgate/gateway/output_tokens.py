"""Output tokens a request asks for when its client named no limit (Chat's ``max_tokens`` and
Responses' ``max_output_tokens`` are optional; Messages requires one).

The default comes from, first to last: the deployment's ``default_max_tokens`` (a provider whose
server has a short context), the catalogue entry's ``default_max_tokens``, the model's output limit
(``max_output_tokens``, else the catalogue's ``default_max_output_tokens``, 32,000). Always at most
the output limit. The hold is made before a deployment is chosen, so it covers the largest default
among the model's deployments; each attempt then asks its own deployment's default, or less when the
hold could afford less (``Hold.max_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence

from modelgate.catalogue import Model
from modelgate.formats import ClientRequest
from modelgate.upstream.base import Deployment


def deployment_default(model: Model, deployment: Deployment) -> int:
    """What a request without a limit asks of ``deployment``."""
    own = deployment.default_max_tokens
    return model.omitted_max_tokens if own is None else min(own, model.output_limit)


def held_default(model: Model, deployments: Sequence[Deployment]) -> int:
    """What the hold of a request without a limit covers: the most any deployment may be asked."""
    return max((deployment_default(model, d) for d in deployments), default=model.omitted_max_tokens)


def attempt_max_tokens(model: Model, deployment: Deployment, granted: int, client: ClientRequest) -> int:
    """``max_tokens`` of one attempt: what the hold granted, and for a request that named no limit
    no more than the deployment's default."""
    if client.codec.requested_max_tokens(client.body) is not None:
        return granted
    return min(granted, deployment_default(model, deployment))

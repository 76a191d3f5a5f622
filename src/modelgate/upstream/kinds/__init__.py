"""The provider kinds: one module each, registered here by one line in ``AnyKind``.

A new kind is its model here (``kinds/<kind>.py``: a ``ProviderConfig`` subclass with
``kind: Literal["<kind>"]``, its own settings, its facts as class attributes and its start-up
checks in ``check_kind``), the implementation its ``implementation`` names (a new
``upstream/<kind>.py``, or an existing class when the kind only configures one differently), and
its line in ``AnyKind``. Validation, the provider factory, Responses state, tracing and hosted
tools read the model; only data about a kind stays keyed by its name (the cloud beta tables in
``upstream.betas``) and the built-in simulator is recognised by its name where it is labelled.

``ProviderSettings`` is the configuration file's ``[[providers]]`` entry: a union discriminated
on ``kind``, so each entry is validated by its kind's own model. A key that only other kinds
understand does not fail validation here; it is remembered, and the start-up check names it
with the kinds that do understand it (``providers[0] ('a').region: only for kind(s) bedrock,
vertex``), which says more than "extra inputs are not permitted".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, get_args

from pydantic import Discriminator, TypeAdapter, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError

from modelgate.upstream.kind import ProviderConfig
from modelgate.upstream.kinds.anthropic import AnthropicConfig
from modelgate.upstream.kinds.azure import AzureOpenAIConfig
from modelgate.upstream.kinds.bedrock import BedrockConfig
from modelgate.upstream.kinds.openai import OpenAICompatibleConfig, OpenAIConfig
from modelgate.upstream.kinds.simulator import SimulatorProviderConfig
from modelgate.upstream.kinds.vertex import VertexConfig

#: The registered kinds (a new kind: its module, and one line here).
AnyKind = (
    AnthropicConfig
    | OpenAIConfig
    | OpenAICompatibleConfig
    | BedrockConfig
    | VertexConfig
    | AzureOpenAIConfig
    | SimulatorProviderConfig
)


def _kind_name(cls: type[ProviderConfig]) -> str:
    (name,) = get_args(cls.model_fields["kind"].annotation)
    return str(name)


def _input_keys(cls: type[ProviderConfig]) -> frozenset[str]:
    return frozenset(f.alias or name for name, f in cls.model_fields.items())


#: Each kind's name -> its model, in registration order.
KINDS: Mapping[str, type[ProviderConfig]] = {_kind_name(c): c for c in get_args(AnyKind)}

_SHARED_KEYS = _input_keys(ProviderConfig)
#: Keys only some kinds understand -> those kinds, sorted and joined for messages.
_OWNERS: Mapping[str, str] = {
    key: ", ".join(sorted(k for k, c in KINDS.items() if key in _input_keys(c)))
    for key in sorted(set().union(*(_input_keys(c) for c in KINDS.values())) - _SHARED_KEYS)
}


def _set_aside_misplaced(data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if not isinstance(data, Mapping):
        return handler(data)
    kind = data.get("kind")
    model_cls = KINDS.get(kind) if isinstance(kind, str) else None
    if model_cls is None:
        expected = ", ".join(repr(k) for k in KINDS)
        raise PydanticCustomError(
            "provider_kind",
            "kind: Field required (one of {expected})"
            if "kind" not in data
            else "kind: Input should be one of {expected}",
            {"expected": expected},
        )
    own = _input_keys(model_cls)
    misplaced = tuple((k, _OWNERS[k]) for k in data if k not in own and k in _OWNERS)
    if not misplaced:
        return handler(data)
    model = handler({k: v for k, v in data.items() if k in own or k not in _OWNERS})
    model._misplaced = misplaced
    return model


ProviderSettings = Annotated[AnyKind, Discriminator("kind"), WrapValidator(_set_aside_misplaced)]

_ADAPTER: TypeAdapter[ProviderConfig] = TypeAdapter(ProviderSettings)


def parse_provider(data: Mapping[str, Any]) -> ProviderConfig:
    """One ``[[providers]]`` entry as its kind's model (raises pydantic's ``ValidationError``)."""
    return _ADAPTER.validate_python(data)


def stores_responses(kind: str) -> bool:
    """Whether a kind's upstream implements stored Responses state."""
    model = KINDS.get(kind)
    return model is not None and model.stores_responses


def runs_hosted_tools(kind: str) -> bool:
    """Whether a kind's upstream runs its dialect's hosted tools (yes for an unknown kind)."""
    model = KINDS.get(kind)
    return model is None or model.runs_hosted_tools


def genai_provider_name(kind: str) -> str:
    """A kind's OpenTelemetry ``gen_ai.provider.name`` (the kind's own name when the
    conventions name none, or when the kind is not registered)."""
    model = KINDS.get(kind)
    return (model.genai_name if model is not None else None) or kind


def without_kind_tag(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """An error location inside ``providers`` without the union's kind tag
    (``providers.0.anthropic.headers`` -> ``providers.0.headers``), as the file spells it."""
    if len(loc) > 2 and loc[0] == "providers" and isinstance(loc[1], int) and loc[2] in KINDS:
        return loc[:2] + loc[3:]
    return loc

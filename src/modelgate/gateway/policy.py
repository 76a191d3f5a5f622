"""Key-group policy (docs/architecture.md §2): which wire formats and which models a key's group may use.

- ``Basic`` and ``Pro`` keys serve ``aria-*`` models, ``Nova`` keys ``nova-*`` models.
- A ``Nova`` key on the Messages format, or a ``Basic``/``Pro`` key on the Responses format, is a
  403 that points to the endpoints the key can use.
- Aliases resolve before the family and allowed-models checks; an unknown model, one of the other
  family and one outside the key's list are the same 404, so a key learns nothing about models it
  cannot use.
"""

from __future__ import annotations

from collections.abc import Mapping

from modelgate import errors
from modelgate.catalogue import Catalogue, Family, Model
from modelgate.formats import FORMATS, FormatName
from modelgate.storage.base import Group, KeyRecord

FAMILY_OF_GROUP: Mapping[Group, Family] = {"Basic": "aria", "Pro": "aria", "Nova": "nova"}
#: Longer model names are no catalogue id or alias; error messages quote only this much.
MAX_MODEL_NAME = 256


def check_format(fmt: FormatName, key: KeyRecord) -> None:
    """A key group the format does not serve is a 403 with the format's hint (``Format.refused_groups``)."""
    hint = FORMATS[fmt].refused_groups.get(key.group)
    if hint is not None:
        raise errors.PermissionDenied(hint, code="wrong_endpoint_for_key_group")


def visible(model: Model, key: KeyRecord) -> bool:
    allowed = key.allowed_models
    return model.family == FAMILY_OF_GROUP[key.group] and (allowed is None or model.id in allowed)


def model_for(catalogue: Catalogue, key: KeyRecord, name: object) -> Model:
    """The canonical model a request names (``Format.model_name``), if this key may use it."""
    if not isinstance(name, str) or not name:
        raise errors.InvalidRequest("model: a model id is required", param="model")
    if len(name) > MAX_MODEL_NAME:
        raise errors.NotFound(f"model {name[:MAX_MODEL_NAME]}… is not available for this key", param="model")
    model = catalogue.resolve(name)
    if model is None or not visible(model, key):
        raise errors.NotFound(f"model {name} is not available for this key", param="model")
    return model


def visible_models(catalogue: Catalogue, key: KeyRecord) -> list[Model]:
    """``/v1/models`` for this key: its group's family ∩ its allowed models, never aliases."""
    return [m for m in catalogue.in_family(FAMILY_OF_GROUP[key.group]) if visible(m, key)]

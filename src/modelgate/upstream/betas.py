"""Which of a client's ``anthropic-beta`` values each Messages-dialect kind passes, strips or
refuses, and the body fields that go with a stripped beta.

``anthropic`` upstreams get the header as the client sent it, byte for byte (Anthropic's gateway
guidance: forward ``anthropic-beta`` and ``anthropic-version`` unchanged; the API itself judges
betas it does not know). Bedrock and Vertex AI accept only some betas and answer ``invalid beta
flag`` (400) for the rest, so for them the table below decides, beta by beta:

- ``pass``: sent (under the cloud's own name where it has one: tool search is
  ``tool-search-tool-2025-10-19`` there, ``advanced-tool-use-2025-11-20`` on the Anthropic API);
- ``strip``: not sent, and the request's body fields that only that beta allows are removed
  with it (``BODY_FIELDS``), so the cloud neither refuses the beta nor the fields (a beta whose
  feature has become generally available loses only its name: ``HEADER_ONLY``);
- ``refuse``: the request is refused with a 400 naming the beta: the feature cannot work on the
  cloud and quietly dropping it would change the answer (files, MCP servers, skills, server-run
  code execution and web fetch).

A beta the table does not name is stripped on Bedrock and Vertex (logged at debug): a new client
release adds betas faster than clouds adopt them, and an unknown flag fails the whole request.
Per provider, ``betas = { pass = [...], strip = [...], refuse = [...] }`` overrides the table for
the betas it names (any kind, ``anthropic`` included).

Vertex's token counter accepts fewer betas than its predictions (``VERTEX_COUNT_TOKENS``);
the others are stripped, with their fields, on counting requests only.

Last checked 2026-11-26 against: the AWS Bedrock user guide (Anthropic Claude Messages API: betas
go in the body as ``anthropic_beta``; the tool search tool is gated by
``tool-search-tool-2025-10-19``), Anthropic's Vertex AI page (betas in the ``anthropic-beta``
header), Claude Code's own per-provider beta sets (``constants/betas.ts``: the betas it sends
Bedrock in the body, the Vertex count-tokens allowlist, the third-party tool search name) and
LiteLLM's maintained per-provider table (``anthropic_beta_headers_config.json``). Betas Claude
Code 2.1.332 sends (docs/reference/wire-formats.md §7) are all listed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from modelgate import errors

log = logging.getLogger(__name__)

Action = Literal["pass", "strip", "refuse"]


@dataclass(frozen=True, slots=True)
class Rule:
    action: Action
    #: The name the cloud knows the beta by, when it differs.
    send_as: str | None = None
    #: Whether a strip takes the beta's body fields too; not when the feature has become
    #: generally available and only the retired beta name is refused.
    fields: bool = True


PASS = Rule("pass")
STRIP = Rule("strip")
REFUSE = Rule("refuse")
TOOL_SEARCH_CLOUD = Rule("pass", send_as="tool-search-tool-2025-10-19")
HEADER_ONLY = Rule("strip", fields=False)

#: Body fields only a beta allows: removed when the beta is stripped. ``a.b`` is a nested key,
#: ``tools[].x`` a key of every tool, ``a>b.c`` moves ``a`` to ``b.c`` (unless that is set).
BODY_FIELDS: Mapping[str, tuple[str, ...]] = {
    "context-management-2025-06-27": ("context_management",),
    "effort-2025-11-24": ("output_config.effort",),
    "advanced-tool-use-2025-11-20": (
        "tools[].defer_loading",
        "tools[].input_examples",
        "tools[].allowed_callers",
    ),
    "tool-search-tool-2025-10-19": ("tools[].defer_loading",),
    "tool-examples-2025-10-29": ("tools[].input_examples",),
    "fine-grained-tool-streaming-2025-05-14": ("tools[].eager_input_streaming",),
    "mcp-client-2025-04-04": ("mcp_servers",),
    "mcp-client-2025-11-20": ("mcp_servers",),
    "skills-2025-10-02": ("container",),
    # The beta's top-level field becomes the generally available output_config.format.
    "structured-outputs-2025-11-13": ("output_format>output_config.format",),
}

# Betas with the same verdict on both clouds.
_COMMON: Mapping[str, Rule] = {
    "interleaved-thinking-2025-05-14": PASS,
    "context-1m-2025-08-07": PASS,
    "context-management-2025-06-27": PASS,
    "advanced-tool-use-2025-11-20": TOOL_SEARCH_CLOUD,
    "tool-search-tool-2025-10-19": PASS,
    "compact-2026-01-12": PASS,
    "computer-use-2025-01-24": PASS,
    "computer-use-2025-11-24": PASS,
    "thinking-token-count-2026-05-13": STRIP,
    "prompt-caching-scope-2026-01-05": STRIP,
    "structured-outputs-2025-11-13": STRIP,  # the GA output_config.format needs no beta
    "token-efficient-tools-2025-02-19": STRIP,
    "output-128k-2025-02-19": STRIP,
    "fast-mode-2026-02-01": STRIP,
    "files-api-2025-04-14": REFUSE,
    "mcp-client-2025-04-04": REFUSE,
    "mcp-client-2025-11-20": REFUSE,
    "skills-2025-10-02": REFUSE,
    "code-execution-2025-08-25": REFUSE,
    "web-fetch-2025-09-10": REFUSE,
}

#: kind -> beta -> rule. Kinds not here pass every beta (``anthropic``).
TABLE: Mapping[str, Mapping[str, Rule]] = {
    "bedrock": {
        **_COMMON,
        "claude-code-20250219": STRIP,  # a client marker Bedrock does not know
        "effort-2025-11-24": PASS,
        "mid-conversation-tool-changes-2026-07-01": PASS,
        "per-turn-control-2026-07-01": STRIP,
        "fine-grained-tool-streaming-2025-05-14": PASS,
        "web-search-2025-03-05": REFUSE,
    },
    "vertex": {
        **_COMMON,
        "claude-code-20250219": PASS,
        # Vertex refuses the beta name; output_config.effort itself is generally available.
        "effort-2025-11-24": HEADER_ONLY,
        "mid-conversation-tool-changes-2026-07-01": STRIP,
        "per-turn-control-2026-07-01": PASS,
        "fine-grained-tool-streaming-2025-05-14": STRIP,
        "web-search-2025-03-05": PASS,
    },
}
#: What a beta the table does not name gets, per kind (``pass`` for kinds not listed).
UNKNOWN: Mapping[str, Action] = {"bedrock": "strip", "vertex": "strip"}
#: The only betas Vertex's count-tokens endpoint accepts.
VERTEX_COUNT_TOKENS = frozenset(
    {"claude-code-20250219", "interleaved-thinking-2025-05-14", "context-management-2025-06-27"}
)


@dataclass(frozen=True, slots=True)
class BetaPlan:
    #: The betas to send, in the cloud's names, in the client's order, without repeats.
    send: tuple[str, ...]
    #: Body fields to remove (``BODY_FIELDS`` of the stripped betas).
    strip_fields: tuple[str, ...] = ()
    stripped: tuple[str, ...] = ()


def split_betas(value: str | None) -> list[str]:
    return [b for b in (part.strip() for part in (value or "").split(",")) if b]


def body_betas(body: dict[str, Any]) -> list[str]:
    """The betas a client put in the body (Bedrock's ``anthropic_beta`` array), removed from it:
    they are judged with the header's and sent the cloud's way."""
    value = body.get("anthropic_beta")
    if not isinstance(value, list) or not all(isinstance(b, str) for b in value):
        return []
    del body["anthropic_beta"]
    return [b.strip() for b in value if b.strip()]


def plan_for(
    kind: str,
    policy: str | list[str],
    overrides: Mapping[str, Action],
    betas: list[str],
    *,
    counting: bool = False,
) -> BetaPlan:
    """``plan_betas`` for the client's ``betas`` that the provider's ``anthropic_beta`` policy
    lets through (``forward``: all, ``drop``: none, a list: those in it)."""
    if policy == "drop":
        return BetaPlan(())
    if not isinstance(policy, str):
        allowed = set(policy)
        betas = [b for b in betas if b in allowed]
    return plan_betas(kind, betas, overrides, counting=counting)


def plan_betas(
    kind: str,
    betas: Iterable[str],
    overrides: Mapping[str, Action] | None = None,
    *,
    counting: bool = False,
) -> BetaPlan:
    """What to do with ``betas`` on a provider of ``kind``; raises ``InvalidRequest`` (400,
    naming the beta) for one that is refused."""
    table = TABLE.get(kind, {})
    unknown: Action = UNKNOWN.get(kind, "pass")
    send: list[str] = []
    fields: list[str] = []
    stripped: list[str] = []
    for beta in betas:
        override = (overrides or {}).get(beta)
        rule = Rule(override) if override is not None else table.get(beta, Rule(unknown))
        if rule.action == "pass" and counting and kind == "vertex" and beta not in VERTEX_COUNT_TOKENS:
            rule = STRIP
        if rule.action == "refuse":
            raise errors.InvalidRequest(
                f"anthropic-beta {beta} is not supported by this model's upstream ({kind})",
                param="anthropic-beta",
            )
        if rule.action == "strip":
            if beta not in table and override is None:
                log.debug("anthropic-beta %s is unknown for kind %s: not sent", beta, kind)
            stripped.append(beta)
            if rule.fields:
                fields += [f for f in BODY_FIELDS.get(beta, ()) if f not in fields]
            continue
        name = rule.send_as or beta
        if name not in send:
            send.append(name)
    # A field another sent beta still allows stays (tools[].defer_loading under tool search).
    kept = {f for beta, names in BODY_FIELDS.items() if beta in send for f in names}
    return BetaPlan(tuple(send), tuple(f for f in fields if f not in kept), tuple(stripped))


def strip_fields(body: dict[str, Any], fields: Iterable[str]) -> bool:
    """Remove ``fields`` from ``body`` in place; whether anything was removed."""
    removed = False
    for path in fields:
        if ">" in path:
            removed = _move(body, *path.split(">", 1)) or removed
            continue
        head, _, rest = path.partition(".")
        if head.endswith("[]"):
            items = body.get(head[:-2])
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and rest:
                    removed = strip_fields(item, [rest]) or removed
        elif rest:
            inner = body.get(head)
            if isinstance(inner, dict):
                removed = strip_fields(inner, [rest]) or removed
                if not inner:
                    del body[head]  # an emptied object (output_config) is not sent
        elif head in body:
            del body[head]
            removed = True
    return removed


def _move(body: dict[str, Any], source: str, target: str) -> bool:
    if source not in body:
        return False
    value = body.pop(source)
    parent, _, name = target.rpartition(".")
    holder = body.setdefault(parent, {}) if parent else body
    if isinstance(holder, dict):
        holder.setdefault(name, value)
    return True

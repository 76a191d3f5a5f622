"""The beta table and its plan: every Claude Code beta has a verdict per cloud, stripped betas take
their fields, overrides win, and the ``betas`` setting is validated with messages naming it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from modelgate import errors
from modelgate.upstream.betas import BODY_FIELDS, TABLE, plan_betas, plan_for, strip_fields
from modelgate.upstream.config import parse_provider, validate_upstreams
from modelgate.upstream.kinds.anthropic import AnthropicConfig

CLAUDE_CODE_BETAS = [
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "mid-conversation-tool-changes-2026-07-01",
    "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
    "per-turn-control-2026-07-01",
]


@pytest.mark.parametrize("kind", ["bedrock", "vertex"])
def test_every_claude_code_beta_has_a_verdict_and_none_is_refused(kind: str) -> None:
    assert set(CLAUDE_CODE_BETAS) <= set(TABLE[kind])
    plan = plan_betas(kind, CLAUDE_CODE_BETAS)  # refusing would fail every Claude Code request
    assert set(plan.send) | set(plan.stripped) >= set(CLAUDE_CODE_BETAS) - {"advanced-tool-use-2025-11-20"}


def test_unknown_betas_pass_on_anthropic_and_are_stripped_on_the_clouds() -> None:
    assert plan_betas("anthropic", ["x-2030-01-01"]).send == ("x-2030-01-01",)
    for kind in ("bedrock", "vertex"):
        plan = plan_betas(kind, ["x-2030-01-01"])
        assert (plan.send, plan.stripped) == ((), ("x-2030-01-01",))


def test_stripped_betas_take_their_fields_unless_a_sent_beta_needs_them() -> None:
    plan = plan_betas("vertex", ["effort-2025-11-24", "fine-grained-tool-streaming-2025-05-14"])
    # Effort is generally available: Vertex loses only the retired beta name, not the field.
    assert plan.stripped == ("effort-2025-11-24", "fine-grained-tool-streaming-2025-05-14")
    assert plan.strip_fields == ("tools[].eager_input_streaming",)
    strip: Any = {"effort-2025-11-24": "strip"}  # an operator's strip takes the field too
    assert plan_betas("vertex", ["effort-2025-11-24"], strip).strip_fields == ("output_config.effort",)
    overrides: Any = {"advanced-tool-use-2025-11-20": "strip"}
    plan = plan_betas("bedrock", ["advanced-tool-use-2025-11-20", "tool-search-tool-2025-10-19"], overrides)
    assert "tools[].defer_loading" not in plan.strip_fields  # tool search still sent
    assert "tools[].input_examples" in plan.strip_fields


def test_a_refused_beta_is_an_invalid_request_naming_it() -> None:
    with pytest.raises(errors.InvalidRequest, match="files-api-2025-04-14") as caught:
        plan_betas("bedrock", ["claude-code-20250219", "files-api-2025-04-14"])
    assert caught.value.param == "anthropic-beta" and caught.value.http_status() == 400
    overrides: Any = {"files-api-2025-04-14": "strip", "claude-code-20250219": "refuse"}
    with pytest.raises(errors.InvalidRequest, match="claude-code-20250219"):
        plan_betas("anthropic", ["claude-code-20250219"], overrides)
    assert plan_betas("bedrock", ["files-api-2025-04-14"], overrides).stripped == ("files-api-2025-04-14",)


def test_the_anthropic_beta_policy_selects_first() -> None:
    assert plan_for("bedrock", "drop", {}, ["effort-2025-11-24"]).send == ()
    assert plan_for("vertex", ["claude-code-20250219"], {}, CLAUDE_CODE_BETAS).send == (
        "claude-code-20250219",
    )
    # Dropped by the policy is not refused: the policy decides what is looked at.
    assert plan_for("bedrock", ["effort-2025-11-24"], {}, ["files-api-2025-04-14"]).send == ()


def test_strip_fields_paths() -> None:
    body: dict[str, Any] = {
        "context_management": {"edits": []},
        "output_config": {"effort": "low"},
        "tools": [{"name": "a", "defer_loading": True}, {"name": "b"}, "junk"],
        "output_format": {"type": "json_schema", "schema": {}},
        "messages": [],
    }
    fields = [*BODY_FIELDS["context-management-2025-06-27"], *BODY_FIELDS["effort-2025-11-24"]]
    fields += [*BODY_FIELDS["tool-search-tool-2025-10-19"], *BODY_FIELDS["structured-outputs-2025-11-13"]]
    assert strip_fields(body, fields)
    assert body == {
        "tools": [{"name": "a"}, {"name": "b"}, "junk"],
        "messages": [],
        "output_config": {"format": {"type": "json_schema", "schema": {}}},  # moved, not lost
    }
    assert not strip_fields(body, ["context_management", "tools[].defer_loading", "x.y"])


def test_the_betas_setting_is_validated() -> None:
    provider = AnthropicConfig.model_validate(
        {"name": "a", "kind": "anthropic", "api_key_env": "K", "betas": {"pass": ["x"], "refuse": ["y"]}}
    )
    assert provider.betas.actions() == {"x": "pass", "y": "refuse"}
    for bad in ({"pass": ["x"], "strip": ["x"]}, {"pass": ["a,b"]}, {"refuse": [""]}, {"allow": ["x"]}):
        with pytest.raises(ValidationError):
            parse_provider({"name": "a", "kind": "anthropic", "betas": bad})
    openai = parse_provider({"name": "o", "kind": "openai", "api_key_env": "K", "betas": {"strip": ["x"]}})
    with pytest.raises(ValueError, match=r"\('o'\)\.betas: only for kind\(s\) anthropic, bedrock, vertex"):
        validate_upstreams([openai], {}, {"K": "sk-proj-0123456789abcdefghij"})

"""Official SDK clients pointed at a test gateway (no retries, so statuses surface as raised)."""

from __future__ import annotations

import anthropic
import openai


def anthropic_client(
    base_url: str, key: str, *, header: str = "bearer", version: str | None = None
) -> anthropic.Anthropic:
    """``header="bearer"``: SDK 2.x default (Authorization: Bearer); ``"x-api-key"``: as Claude Code."""
    headers: dict[str, str] = {}
    if version is not None:
        headers["anthropic-version"] = version
    if header == "x-api-key":
        headers["X-Api-Key"] = key
        return anthropic.Anthropic(
            base_url=base_url,
            api_key="unused",
            default_headers={**headers, "Authorization": anthropic.Omit()},
            max_retries=0,
        )  # type: ignore[dict-item]
    return anthropic.Anthropic(base_url=base_url, api_key=key, default_headers=headers, max_retries=0)


def openai_client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)

"""Official SDK clients pointed at a test gateway (no retries, so statuses surface as raised).

An SDK client keeps a pool of keep-alive connections until it is closed: use the functions in a
``with`` block, or ask the ``sdk`` fixture (``SdkClients``), which closes every client it made
when the test ends.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Self

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
        # The SDK removes a default header given as Omit() (anthropic._base_client.build_headers)
        # but types default_headers as Mapping[str, str].
        without_bearer: dict[str, str] = {**headers, "Authorization": anthropic.Omit()}  # type: ignore[dict-item]
        return anthropic.Anthropic(
            base_url=base_url, api_key="unused", default_headers=without_bearer, max_retries=0
        )
    return anthropic.Anthropic(base_url=base_url, api_key=key, default_headers=headers, max_retries=0)


def openai_client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)


class SdkClients:
    """The SDK clients of one test, all closed together (the ``sdk`` fixture)."""

    def __init__(self) -> None:
        self._open = ExitStack()

    def anthropic(
        self, base_url: str, key: str, *, header: str = "bearer", version: str | None = None
    ) -> anthropic.Anthropic:
        return self._open.enter_context(anthropic_client(base_url, key, header=header, version=version))

    def openai(self, base_url: str, key: str) -> openai.OpenAI:
        return self._open.enter_context(openai_client(base_url, key))

    def close(self) -> None:
        self._open.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

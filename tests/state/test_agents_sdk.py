"""The OpenAI Agents SDK runs a tool loop through the gateway with server-side state: chained by
``auto_previous_response_id=True`` and kept in a conversation (``conversation_id``), on a Nova
model translated to an Anthropic-dialect upstream and on the simulator. Each later turn sends
only the new items; the gateway supplies the rest from what it stored."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool
from tests.gateway.clients import SdkClients
from tests.state.conftest import FINAL, SIMULATED, TRANSLATED, Stateful


def _client(stateful: Stateful, secret: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stateful.gateway.base_url}/v1", api_key=secret, max_retries=0)


def _agent(client: openai.AsyncOpenAI, model: str, executed: list[str]) -> Agent[Any]:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        executed.append(city)
        return f"Sunny in {city}"

    return Agent(
        name="weather",
        instructions="Answer with the weather; use get_weather.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=model, openai_client=client),
    )


async def _run(agent: Agent[Any], prompt: str, **state: Any) -> Any:
    config = RunConfig(tracing_disabled=True)  # no trace export: the machine reaches no such host
    return await Runner.run(agent, prompt, run_config=config, max_turns=4, **state)


@pytest.mark.parametrize("model", [TRANSLATED, SIMULATED])
async def test_a_tool_loop_chained_by_previous_response_id(stateful: Stateful, model: str) -> None:
    secret, key_id = stateful.key()
    executed: list[str] = []
    before = len(stateful.sent(TRANSLATED))
    async with _client(stateful, secret) as client:
        agent = _agent(client, model, executed)
        result = await _run(
            agent, "What is the weather in Paris? Use get_weather.", auto_previous_response_id=True
        )

    assert len(executed) == 1
    if model == TRANSLATED:
        assert executed == ["Paris"] and result.final_output == FINAL
        turns = stateful.sent(TRANSLATED)[before:]
        assert len(turns) == 2
        # The second turn carried only the tool output; the upstream still got the whole loop.
        roles = [m["role"] for m in turns[1].json()["messages"]]
        assert roles == ["user", "assistant", "user"]
        blocks = [b["type"] for m in turns[1].json()["messages"] for b in m["content"]]
        assert blocks == ["text", "text", "tool_use", "tool_result"]
    else:
        assert "Tool result received: Sunny in" in result.final_output
    # Two model requests, each billed once.
    assert len(stateful.usage(key_id, 2)) == 2


@pytest.mark.parametrize("model", [TRANSLATED, SIMULATED])
async def test_a_tool_loop_kept_in_a_conversation(stateful: Stateful, sdk: SdkClients, model: str) -> None:
    secret, _ = stateful.key()
    sync = sdk.openai(stateful.gateway.base_url, secret)
    conversation = sync.conversations.create()
    executed: list[str] = []
    async with _client(stateful, secret) as client:
        agent = _agent(client, model, executed)
        result = await _run(
            agent, "What is the weather in Paris? Use get_weather.", conversation_id=conversation.id
        )
        assert len(executed) == 1
        if model == TRANSLATED:
            assert result.final_output == FINAL
        items = sync.conversations.items.list(conversation.id, order="asc").data
        kinds = [i.type for i in items]
        # user prompt, (text,) call, call output, final answer: all appended as the loop ran.
        assert kinds[0] == "message" and kinds[-1] == "message"
        assert "function_call" in kinds and "function_call_output" in kinds
        assert kinds.index("function_call") < kinds.index("function_call_output")

        # A second run in the same conversation starts from all of it.
        again = await _run(agent, "And tomorrow? Use get_weather.", conversation_id=conversation.id)
    assert again.final_output
    assert len(sync.conversations.items.list(conversation.id, limit=100).data) > len(items)

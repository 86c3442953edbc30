#!/usr/bin/env python3
"""Runs an OpenAI Agents SDK agent through an aisix gateway: its default model (the Responses
API), one function tool that the first turn must call (`tool_choice: required`, which the SDK
resets after the call), and the answer after the tool's output. Tracing is off, so nothing
leaves 127.0.0.1. Prints what it saw; exits 0 when every check passed, 1 otherwise.

    AISIX_SDK_BASE_URL   gateway base URL with /v1
    AISIX_SDK_API_KEY    a gateway API key
    AISIX_SDK_MODEL      the model the agent uses
"""

from __future__ import annotations

import os
import sys

from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"18C and sunny in {city}"


def main() -> int:
    set_tracing_disabled(True)
    client = AsyncOpenAI(
        base_url=os.environ["AISIX_SDK_BASE_URL"],
        api_key=os.environ["AISIX_SDK_API_KEY"],
        max_retries=0,
    )
    set_default_openai_client(client, use_for_tracing=False)
    model = os.environ["AISIX_SDK_MODEL"]
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=model,
        tools=[get_weather],
        model_settings=ModelSettings(tool_choice="required"),
    )
    result = Runner.run_sync(agent, "What is the weather in Paris?")
    print(f"tool calls: {calls}")
    print(f"final output: {result.final_output!r}")
    kinds = [type(item).__name__ for item in result.new_items]
    print(f"items: {kinds}")
    responses = [r.response_id for r in result.raw_responses]
    print(f"responses: {responses}")
    ok = (
        isinstance(agent.model, str)
        and len(calls) == 1
        and result.final_output == "Hello from the mock provider."
        and "ToolCallItem" in kinds
        and "ToolCallOutputItem" in kinds
        and all(r and r.startswith("resp_") for r in responses)
    )
    # The default model for a named model is the Responses one.
    from agents.models.openai_provider import OpenAIProvider

    expected = OpenAIProvider(openai_client=client).get_model(model)
    ok = ok and isinstance(expected, OpenAIResponsesModel)
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Drives an aisix gateway's Responses API with the official `openai` Python SDK.

Every answer and every streamed event is validated with the SDK's own pydantic models
(`Response`, `ResponseStreamEvent`), strictly. Prints one line per check; exits 0 when every
check passed, 1 when one failed, 2 when it could not run. Settings, from the environment:

    AISIX_SDK_BASE_URL     gateway base URL with /v1
    AISIX_SDK_API_KEY      a gateway API key
    AISIX_SDK_MODEL        the model to drive
    AISIX_SDK_TRANSLATED   "1" when the model's key speaks only chat (the gateway translates and
                           keeps the conversation: GET, input_items and DELETE are checked, and
                           a built-in tool is refused); "0" for a key that serves the API
    AISIX_SDK_TIMEOUT      seconds per request (default 30)
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Callable, List

try:
    import openai
    import pydantic
    from openai.types.responses import Response, ResponseStreamEvent
except ImportError:  # pragma: no cover - depends on the environment
    print("the `openai` package is missing: run `bash scripts/setup-python.sh`", file=sys.stderr)
    sys.exit(2)

EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class CheckFailed(Exception):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def valid_response(response: Response) -> Response:
    """The answer re-read strictly by the SDK's model (what `construct` would let pass)."""
    return Response.model_validate(response.to_dict())


def valid_event(event) -> object:
    return EVENTS.validate_python(event.to_dict())


class City(pydantic.BaseModel):
    name: str


def main() -> int:
    client = openai.OpenAI(
        base_url=os.environ["AISIX_SDK_BASE_URL"],
        api_key=os.environ["AISIX_SDK_API_KEY"],
        timeout=float(os.environ.get("AISIX_SDK_TIMEOUT", "30")),
        max_retries=0,
    )
    model = os.environ["AISIX_SDK_MODEL"]
    translated = os.environ.get("AISIX_SDK_TRANSLATED") == "1"
    checks: List[Callable[[], str]] = []

    def check(fn: Callable[[], str]) -> Callable[[], str]:
        checks.append(fn)
        return fn

    state = {}

    @check
    def create_text() -> str:
        response = valid_response(
            client.responses.create(model=model, instructions="Be brief.", input="Say hello.")
        )
        expect(response.status == "completed", f"status {response.status}")
        expect(response.output_text != "", "no output text")
        expect(response.usage is not None and response.usage.output_tokens > 0, "no usage")
        state["text"] = response.output_text
        return f"text {response.output_text!r}, usage {response.usage.input_tokens}/{response.usage.output_tokens}"

    @check
    def stream_text() -> str:
        kinds = []
        with client.responses.stream(model=model, input="Say hello.") as stream:
            for event in stream:
                valid_event(event)
                kinds.append(event.type)
            final = valid_response(stream.get_final_response())
        expect(kinds[0] == "response.created", f"first event {kinds[0]}")
        expect(kinds[-1] == "response.completed", f"last event {kinds[-1]}")
        expect("response.output_text.delta" in kinds, f"no text delta in {kinds}")
        expect(final.output_text == state["text"], f"{final.output_text!r} != {state['text']!r}")
        raw = list(client.responses.create(model=model, input="Say hello.", stream=True))
        numbers = [valid_event(e).sequence_number for e in raw]
        expect(numbers == list(range(len(numbers))), f"sequence numbers {numbers}")
        return f"{len(kinds)} events, the same text as the whole answer"

    @check
    def function_round_trip() -> str:
        first = valid_response(
            client.responses.create(
                model=model, input="Weather in Paris?", tools=[TOOL], tool_choice="required"
            )
        )
        calls = [item for item in first.output if item.type == "function_call"]
        expect(len(calls) == 1, f"output {first.output}")
        call = calls[0]
        expect(call.name == "get_weather", call.name)
        arguments = json.loads(call.arguments)
        expect(isinstance(arguments.get("city"), str), call.arguments)
        second = valid_response(
            client.responses.create(
                model=model,
                tools=[TOOL],
                input=[
                    {"role": "user", "content": "Weather in Paris?"},
                    {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                    {"type": "function_call_output", "call_id": call.call_id, "output": "18C and sunny"},
                ],
            )
        )
        expect(second.output_text != "", "no answer after the tool's output")
        kinds = []
        with client.responses.stream(
            model=model, input="Weather in Paris?", tools=[TOOL], tool_choice="required"
        ) as stream:
            for event in stream:
                valid_event(event)
                kinds.append(event.type)
            final = valid_response(stream.get_final_response())
        expect("response.function_call_arguments.delta" in kinds, f"{kinds}")
        expect(final.output[-1].type == "function_call", f"{final.output}")
        return f"called {call.name}({call.arguments}), answered {second.output_text!r}"

    @check
    def json_schema() -> str:
        parsed = client.responses.parse(model=model, input="Name a city.", text_format=City)
        valid_response(parsed)
        expect(isinstance(parsed.output_parsed, City), f"parsed {parsed.output_parsed!r}")
        return f"parsed {parsed.output_parsed!r}"

    @check
    def chain_of_three() -> str:
        first = valid_response(client.responses.create(model=model, input="My name is Ada."))
        second = valid_response(
            client.responses.create(model=model, input="What is my name?", previous_response_id=first.id)
        )
        third = valid_response(
            client.responses.create(model=model, input="Say it again.", previous_response_id=second.id)
        )
        expect(third.previous_response_id == second.id, f"{third.previous_response_id} != {second.id}")
        state["third"] = third
        return f"{first.id} -> {second.id} -> {third.id}"

    @check
    def stored_responses() -> str:
        third = state["third"]
        if not translated:
            return "skipped: a native key keeps its own state"
        again = valid_response(client.responses.retrieve(third.id))
        expect(again.id == third.id and again.output_text == third.output_text, "retrieved differs")
        items = client.responses.input_items.list(third.id, order="asc")
        texts = [item.type for item in items.data]
        expect(len(items.data) == 5, f"input items {texts}")
        deleted = client.responses.delete(third.id)
        try:
            client.responses.retrieve(third.id)
        except openai.NotFoundError:
            pass
        else:
            raise CheckFailed("a deleted response was still found")
        return f"retrieved, {len(items.data)} input items, deleted ({deleted})"

    @check
    def errors() -> str:
        try:
            client.responses.create(model="no-such-model", input="x")
        except openai.NotFoundError as error:
            expect(error.status_code == 404, str(error.status_code))
        else:
            raise CheckFailed("an unknown model was answered")
        if translated:
            offered = client.responses.with_raw_response.create(
                model=model, input="x", tools=[{"type": "web_search"}]
            )
            dropped = offered.headers.get("x-aisix-dropped-tools")
            expect(dropped == "web_search", f"x-aisix-dropped-tools: {dropped}")
            expect(offered.parse().output_text != "", "an offered built-in tool is left out")
            try:
                client.responses.create(
                    model=model,
                    input="x",
                    tools=[{"type": "web_search"}],
                    tool_choice={"type": "web_search"},
                )
            except openai.BadRequestError as error:
                expect(error.body.get("param") == "tool_choice", str(error.body))
            else:
                raise CheckFailed("a forced built-in tool was accepted on a translated path")
            try:
                client.responses.create(model=model, input="x", previous_response_id="resp_gone")
            except openai.NotFoundError as error:
                expect("resp_gone" in error.message, error.message)
            else:
                raise CheckFailed("an unknown previous_response_id was accepted")
        return "404 for an unknown model" + (", a built-in tool left out when offered and 400 when forced, 404 for an unknown id" if translated else "")

    failed = 0
    for fn in checks:
        try:
            print(f"ok   {fn.__name__}: {fn()}")
        except Exception as error:  # noqa: BLE001 - every failure is reported
            failed += 1
            print(f"FAIL {fn.__name__}: {error!r}")
            traceback.print_exc(limit=3)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

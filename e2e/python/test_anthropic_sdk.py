#!/usr/bin/env python3
"""Drives an Anthropic Messages endpoint with the official `anthropic` Python SDK and checks
what the SDK sees: a plain message, a streamed one (and its raw event order), tool use unary
and streamed with a tool round trip, count_tokens, and, when asked, the error envelopes.

Prints one line per check and exits 0 when every check passed, 1 when one failed, 2 when it
could not run at all. Configuration comes from the environment:

    AISIX_ANTHROPIC_BASE_URL       the server's origin, e.g. http://127.0.0.1:8080 (the SDK adds
                                   /v1/messages)
    AISIX_ANTHROPIC_API_KEY        the key to present
    AISIX_ANTHROPIC_AUTH           "sdk" (default: the SDK's own way, `Authorization: Bearer`
                                   since anthropic 2.x) or "x-api-key" (the key in that header)
    AISIX_ANTHROPIC_MODEL          a model the key may use
    AISIX_ANTHROPIC_EXPECT_TEXT    when set, the exact text a plain answer must have (a
                                   deterministic upstream)
    AISIX_ANTHROPIC_UNKNOWN_MODEL  when set, a model the server does not serve: 404
                                   not_found_error is expected
    AISIX_ANTHROPIC_WRONG_KEY      when set, a key the server refuses: 401 authentication_error
                                   is expected
    AISIX_ANTHROPIC_TIMEOUT        seconds per request (default 30)

Set up the interpreter with `bash scripts/setup-python.sh`.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Callable, List, Optional

try:
    import anthropic
except ImportError:  # pragma: no cover - depends on the environment
    print(
        "the `anthropic` package is missing: run `bash scripts/setup-python.sh` and use "
        "target/e2e-venv/bin/python",
        file=sys.stderr,
    )
    sys.exit(2)

PROMPT = [{"role": "user", "content": "Say hello to the gateway."}]
SYSTEM = "You are a terse assistant."
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
MAX_TOKENS = 256
RAW_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
}


class CheckFailed(Exception):
    """An expectation about the server's answer did not hold."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def expect_order(events: List[object]) -> str:
    """Anthropic's event order: message_start; per block its start, deltas, stop; one
    message_delta; message_stop last. Pings may come anywhere after message_start."""
    # The SDK's stream helper adds events of its own (text, input_json, ...); only the
    # server's count.
    events = [e for e in events if getattr(e, "type", None) in RAW_EVENTS]
    kinds = [getattr(event, "type", None) for event in events]
    expect(kinds and kinds[0] == "message_start", f"first event is not message_start: {kinds}")
    expect(kinds[-1] == "message_stop", f"last event is not message_stop: {kinds}")
    expect(kinds.count("message_delta") == 1, f"not one message_delta: {kinds}")
    expect(kinds[-2] == "message_delta", f"message_delta is not right before message_stop: {kinds}")
    open_index: Optional[int] = None
    next_index = 0
    for event in events[1:-2]:
        kind = getattr(event, "type", None)
        if kind == "content_block_start":
            expect(open_index is None, f"a block starts while {open_index} is open: {kinds}")
            expect(event.index == next_index, f"block {event.index} starts, {next_index} expected")
            open_index = event.index
            next_index += 1
        elif kind in ("content_block_delta", "content_block_stop"):
            expect(event.index == open_index, f"{kind} for block {event.index}, open: {open_index}")
            if kind == "content_block_stop":
                open_index = None
        else:
            expect(kind == "ping", f"unexpected {kind} inside the message: {kinds}")
    expect(open_index is None, f"block {open_index} never stopped: {kinds}")
    return " ".join(k for k in kinds if k != "content_block_delta")


class Suite:
    def __init__(self) -> None:
        env = os.environ.get
        self.base_url = env("AISIX_ANTHROPIC_BASE_URL")
        self.api_key = env("AISIX_ANTHROPIC_API_KEY")
        self.model = env("AISIX_ANTHROPIC_MODEL")
        if not (self.base_url and self.api_key and self.model):
            print(
                "set AISIX_ANTHROPIC_BASE_URL, AISIX_ANTHROPIC_API_KEY and AISIX_ANTHROPIC_MODEL",
                file=sys.stderr,
            )
            sys.exit(2)
        self.x_api_key = env("AISIX_ANTHROPIC_AUTH", "sdk") == "x-api-key"
        self.expect_text = env("AISIX_ANTHROPIC_EXPECT_TEXT")
        self.unknown_model = env("AISIX_ANTHROPIC_UNKNOWN_MODEL")
        self.wrong_key = env("AISIX_ANTHROPIC_WRONG_KEY")
        self.timeout = float(env("AISIX_ANTHROPIC_TIMEOUT") or 30)
        self.client = self.make_client(self.api_key)
        self.passed = 0
        self.failed = 0
        self.plain_text: Optional[str] = None
        self.tool_input: Optional[dict] = None

    def make_client(self, key: str) -> anthropic.Anthropic:
        auth = {"default_headers": {"x-api-key": key}} if self.x_api_key else {"api_key": key}
        return anthropic.Anthropic(
            base_url=self.base_url, max_retries=0, timeout=self.timeout, **auth
        )

    def run(self, name: str, check: Callable[[], str]) -> None:
        try:
            detail = check()
        except CheckFailed as failure:
            self.failed += 1
            print(f"FAIL {name}: {failure}", flush=True)
        except anthropic.APIError as error:
            self.failed += 1
            status = getattr(error, "status_code", None)
            cause = f" (caused by {error.__cause__!r})" if error.__cause__ else ""
            print(
                f"FAIL {name}: unexpected {type(error).__name__} (HTTP {status}): {error}{cause}",
                flush=True,
            )
        except Exception as error:  # noqa: BLE001 - any exception is a failed check
            self.failed += 1
            print(f"FAIL {name}: unexpected {type(error).__name__}: {error}", flush=True)
            traceback.print_exc(file=sys.stdout)
        else:
            self.passed += 1
            print(f"ok   {name}: {detail}", flush=True)

    def message(self) -> str:
        message = self.client.messages.create(
            model=self.model, max_tokens=MAX_TOKENS, system=SYSTEM, messages=PROMPT
        )
        expect(message.type == "message" and message.role == "assistant", f"not a message: {message}")
        text = text_of(message)
        expect(text != "", f"no text in {message.content}")
        if self.expect_text is not None:
            expect(text == self.expect_text, f"text {text!r}, expected {self.expect_text!r}")
        expect(message.stop_reason == "end_turn", f"stop_reason {message.stop_reason!r}")
        expect(message.usage.input_tokens > 0, f"no input tokens: {message.usage}")
        expect(message.usage.output_tokens > 0, f"no output tokens: {message.usage}")
        self.plain_text = text
        return f"{text!r} usage in={message.usage.input_tokens} out={message.usage.output_tokens}"

    def message_stream(self) -> str:
        with self.client.messages.stream(
            model=self.model, max_tokens=MAX_TOKENS, system=SYSTEM, messages=PROMPT
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        expect(text == text_of(final), f"streamed {text!r}, final message {text_of(final)!r}")
        if self.plain_text is not None:
            expect(text == self.plain_text, f"streamed {text!r}, unary {self.plain_text!r}")
        expect(final.stop_reason == "end_turn", f"stop_reason {final.stop_reason!r}")
        expect(final.usage.input_tokens > 0, f"no input tokens: {final.usage}")
        expect(final.usage.output_tokens > 0, f"no output tokens: {final.usage}")
        return f"{text!r} usage in={final.usage.input_tokens} out={final.usage.output_tokens}"

    def raw_event_order(self) -> str:
        events = list(
            self.client.messages.create(
                model=self.model, max_tokens=MAX_TOKENS, messages=PROMPT, stream=True
            )
        )
        return expect_order(events)

    def tool_use(self) -> str:
        message = self.client.messages.create(
            model=self.model,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "any"},
        )
        expect(message.stop_reason == "tool_use", f"stop_reason {message.stop_reason!r}")
        calls = [block for block in message.content if block.type == "tool_use"]
        expect(len(calls) == 1, f"expected one tool_use block: {message.content}")
        call = calls[0]
        expect(call.name == "get_weather", f"called {call.name!r}")
        expect(isinstance(call.input, dict) and "city" in call.input, f"input {call.input!r}")
        self.tool_input = call.input

        # The round trip: the call and its result go back, and the model answers in text.
        answer = self.client.messages.create(
            model=self.model,
            max_tokens=MAX_TOKENS,
            tools=[WEATHER_TOOL],
            messages=[
                {"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call.id, "content": "18C, cloudy"}
                    ],
                },
            ],
        )
        expect(answer.stop_reason == "end_turn", f"after the result: {answer.stop_reason!r}")
        expect(text_of(answer) != "", f"no text after the tool result: {answer.content}")
        return f"{call.name}({call.input}) then {text_of(answer)!r}"

    def tool_use_stream(self) -> str:
        with self.client.messages.stream(
            model=self.model,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "tool", "name": "get_weather"},
        ) as stream:
            events = list(stream)
            final = stream.get_final_message()
        expect_order(events)
        expect(final.stop_reason == "tool_use", f"stop_reason {final.stop_reason!r}")
        calls = [block for block in final.content if block.type == "tool_use"]
        expect(len(calls) == 1 and calls[0].name == "get_weather", f"calls {final.content}")
        expect(
            any(getattr(e, "type", None) == "input_json" for e in events),
            "no input_json event: the arguments did not stream",
        )
        if self.tool_input is not None:
            expect(
                calls[0].input == self.tool_input,
                f"streamed input {calls[0].input!r}, unary {self.tool_input!r}",
            )
        return f"{calls[0].name}({calls[0].input})"

    def count_tokens(self) -> str:
        counted = self.client.messages.count_tokens(
            model=self.model, system=SYSTEM, messages=PROMPT, tools=[WEATHER_TOOL]
        )
        expect(counted.input_tokens > 0, f"input_tokens {counted.input_tokens}")
        return f"input_tokens={counted.input_tokens}"

    def check_unknown_model(self) -> str:
        return self.expect_error(
            lambda: self.client.messages.create(
                model=self.unknown_model or "", max_tokens=8, messages=PROMPT
            ),
            anthropic.NotFoundError,
            404,
            "not_found_error",
        )

    def check_wrong_key(self) -> str:
        client = self.make_client(self.wrong_key or "")
        return self.expect_error(
            lambda: client.messages.create(model=self.model, max_tokens=8, messages=PROMPT),
            anthropic.AuthenticationError,
            401,
            "authentication_error",
        )

    def expect_error(
        self, call: Callable[[], object], error_class: type, status: int, error_type: str
    ) -> str:
        try:
            result = call()
        except error_class as error:  # type: ignore[misc]
            expect(error.status_code == status, f"HTTP {error.status_code}, expected {status}")
            body = error.body
            expect(
                isinstance(body, dict)
                and body.get("type") == "error"
                and body.get("error", {}).get("type") == error_type
                and bool(body.get("error", {}).get("message")),
                f"expected Anthropic's envelope with type {error_type}, got {body!r}",
            )
            return f"{type(error).__name__} {status} {error_type}"
        except anthropic.APIStatusError as error:
            raise CheckFailed(
                f"expected {error_class.__name__} (HTTP {status}), got {type(error).__name__} "
                f"(HTTP {error.status_code}): {error.body!r}"
            ) from error
        raise CheckFailed(f"expected HTTP {status}, got a success: {result!r}")

    def all(self) -> int:
        self.run("message", self.message)
        self.run("message_stream", self.message_stream)
        self.run("raw_event_order", self.raw_event_order)
        self.run("tool_use", self.tool_use)
        self.run("tool_use_stream", self.tool_use_stream)
        self.run("count_tokens", self.count_tokens)
        if self.unknown_model:
            self.run("unknown_model", self.check_unknown_model)
        if self.wrong_key:
            self.run("wrong_key", self.check_wrong_key)
        print(f"{self.passed} passed, {self.failed} failed (anthropic {anthropic.__version__})")
        return 0 if self.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(Suite().all())

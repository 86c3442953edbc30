#!/usr/bin/env python3
"""Drives chat completions with the official `openai` Python SDK against a model that the
server answers through an Anthropic provider, and checks what the SDK sees: a plain answer, a
stream, a forced tool call with its result sent back, and a streamed tool call.

Prints one line per check and exits 0 when every check passed, 1 when one failed, 2 when it
could not run at all. Configuration comes from the environment:

    AISIX_SDK_BASE_URL     the server's base URL with /v1, e.g. http://127.0.0.1:8080/v1
    AISIX_SDK_API_KEY      the key to present
    AISIX_SDK_CHAT_MODEL   a model the key may use, served by an Anthropic provider
    AISIX_SDK_EXPECT_TEXT  when set, the exact text a plain answer must have
    AISIX_SDK_TIMEOUT      seconds per request (default 30)

Set up the interpreter with `bash scripts/setup-python.sh`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Callable

try:
    import openai
except ImportError:  # pragma: no cover - depends on the environment
    print("the `openai` package is missing: run `bash scripts/setup-python.sh`", file=sys.stderr)
    sys.exit(2)

PROMPT = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


class CheckFailed(Exception):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class Suite:
    def __init__(self) -> None:
        env = os.environ.get
        self.base_url = env("AISIX_SDK_BASE_URL")
        self.api_key = env("AISIX_SDK_API_KEY")
        self.model = env("AISIX_SDK_CHAT_MODEL")
        if not (self.base_url and self.api_key and self.model):
            print(
                "set AISIX_SDK_BASE_URL, AISIX_SDK_API_KEY and AISIX_SDK_CHAT_MODEL",
                file=sys.stderr,
            )
            sys.exit(2)
        self.expect_text = env("AISIX_SDK_EXPECT_TEXT")
        self.client = openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            max_retries=0,
            timeout=float(env("AISIX_SDK_TIMEOUT") or 30),
        )
        self.passed = 0
        self.failed = 0

    def run(self, name: str, check: Callable[[], str]) -> None:
        try:
            detail = check()
        except CheckFailed as failure:
            self.failed += 1
            print(f"FAIL {name}: {failure}", flush=True)
        except Exception as error:  # noqa: BLE001 - every failure is reported
            self.failed += 1
            print(f"FAIL {name}: unexpected {type(error).__name__}: {error}", flush=True)
            traceback.print_exc(file=sys.stdout)
        else:
            self.passed += 1
            print(f"ok   {name}: {detail}", flush=True)

    def chat(self) -> str:
        answer = self.client.chat.completions.create(
            model=self.model,
            messages=[{"role": "system", "content": "Be terse."}, *PROMPT],
            max_tokens=64,
        )
        choice = answer.choices[0]
        text = choice.message.content or ""
        expect(choice.finish_reason == "stop", f"finish_reason {choice.finish_reason!r}")
        expect(text != "", "an empty answer")
        if self.expect_text is not None:
            expect(text == self.expect_text, f"text {text!r}")
        expect(answer.usage is not None and answer.usage.prompt_tokens > 0, f"{answer.usage}")
        return text

    def chat_stream(self) -> str:
        stream = self.client.chat.completions.create(
            model=self.model,
            messages=PROMPT,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        expect(finish == "stop", f"finish_reason {finish!r}")
        if self.expect_text is not None:
            expect(text == self.expect_text, f"text {text!r}")
        expect(usage is not None and usage.completion_tokens > 0, f"usage {usage}")
        return f"{text!r}, {usage.completion_tokens} completion tokens"

    def tool_call(self) -> str:
        answer = self.client.chat.completions.create(
            model=self.model, messages=PROMPT, tools=[WEATHER_TOOL], tool_choice="required"
        )
        choice = answer.choices[0]
        expect(choice.finish_reason == "tool_calls", f"finish_reason {choice.finish_reason!r}")
        calls = choice.message.tool_calls or []
        expect(len(calls) == 1, f"expected one tool call: {calls}")
        call = calls[0]
        expect(call.function.name == "get_weather", f"name {call.function.name!r}")
        arguments = json.loads(call.function.arguments)
        expect(isinstance(arguments.get("city"), str), f"arguments {arguments!r}")
        result = self.client.chat.completions.create(
            model=self.model,
            tools=[WEATHER_TOOL],
            messages=[
                *PROMPT,
                choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "18C, cloudy"},
            ],
        )
        text = result.choices[0].message.content or ""
        expect(text != "", "no text after the tool result")
        return f"{call.function.name}({call.function.arguments}) -> {text!r}"

    def tool_call_stream(self) -> str:
        stream = self.client.chat.completions.create(
            model=self.model,
            messages=PROMPT,
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            stream=True,
        )
        names, arguments, finish = [], "", None
        for chunk in stream:
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for call in choice.delta.tool_calls or []:
                    if call.function and call.function.name:
                        names.append(call.function.name)
                    if call.function and call.function.arguments:
                        arguments += call.function.arguments
        expect(names == ["get_weather"], f"tool names {names}")
        expect(finish == "tool_calls", f"finish_reason {finish!r}")
        parsed = json.loads(arguments)
        expect(isinstance(parsed.get("city"), str), f"arguments {arguments!r}")
        return arguments

    def all(self) -> int:
        self.run("chat", self.chat)
        self.run("chat_stream", self.chat_stream)
        self.run("tool_call", self.tool_call)
        self.run("tool_call_stream", self.tool_call_stream)
        print(f"{self.passed} passed, {self.failed} failed (openai {openai.__version__})")
        return 0 if self.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(Suite().all())

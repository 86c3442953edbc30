#!/usr/bin/env python3
"""Drives translated answers that carry reasoning through both official SDKs, so that software
we did not write parses them: the `anthropic` SDK reads an OpenAI-compatible upstream's
`reasoning_content` as `thinking` blocks (whole and streamed), and the `openai` SDK's stream
accumulator rebuilds an Anthropic upstream's thinking as `reasoning_content` next to the text.

The upstream mocks are scripted by the test (e2e/tests/fidelity.rs) to answer, in order: the
two Anthropic-client requests with reasoning, then the two OpenAI-client requests with
thinking. Prints one line per check; exits 0 when all passed, 1 when one failed, 2 when it
could not run. Configuration:

    AISIX_FID_BASE_URL           the gateway's origin, e.g. http://127.0.0.1:8080
    AISIX_FID_API_KEY            the key to present
    AISIX_FID_TO_OPENAI_MODEL    a model served by the OpenAI-compatible upstream
    AISIX_FID_TO_ANTHROPIC_MODEL a model served by the Anthropic upstream
    AISIX_FID_THINKING           the reasoning text both upstreams give
    AISIX_FID_TEXT               the answer text both upstreams give

Then, with the upstreams' default answers, the `openai` SDK's structured-output helpers
(`chat.completions.parse` and `.stream` with a Pydantic `response_format`) against the
Anthropic upstream: the answer's text is the JSON, parsed into the model.
"""

from __future__ import annotations

import os
import sys
import traceback

try:
    import anthropic
    import openai
    import pydantic
except ImportError:  # pragma: no cover - depends on the environment
    print("run `bash scripts/setup-python.sh` and use target/e2e-venv/bin/python", file=sys.stderr)
    sys.exit(2)

PROMPT = [{"role": "user", "content": "Think, then greet."}]


class City(pydantic.BaseModel):
    name: str
    population: int


def main() -> int:
    env = os.environ.get
    base, key = env("AISIX_FID_BASE_URL"), env("AISIX_FID_API_KEY")
    to_openai, to_anthropic = env("AISIX_FID_TO_OPENAI_MODEL"), env("AISIX_FID_TO_ANTHROPIC_MODEL")
    thinking, text = env("AISIX_FID_THINKING"), env("AISIX_FID_TEXT")
    if not all([base, key, to_openai, to_anthropic, thinking, text]):
        print("set every AISIX_FID_* variable", file=sys.stderr)
        return 2
    claude = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=30)
    gpt = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)

    def anthropic_whole() -> str:
        message = claude.messages.create(model=to_openai, max_tokens=2000, messages=PROMPT)
        kinds = [block.type for block in message.content]
        assert kinds == ["thinking", "text"], kinds
        assert message.content[0].thinking == thinking, message.content[0]
        assert message.content[1].text == text, message.content[1]
        assert message.stop_reason == "end_turn", message.stop_reason
        return "thinking + text"

    def anthropic_streamed() -> str:
        with claude.messages.stream(model=to_openai, max_tokens=2000, messages=PROMPT) as stream:
            message = stream.get_final_message()
        kinds = [block.type for block in message.content]
        assert kinds == ["thinking", "text"], kinds
        assert message.content[0].thinking == thinking, message.content[0]
        assert message.content[1].text == text, message.content[1]
        return "thinking + text"

    def openai_whole() -> str:
        completion = gpt.chat.completions.create(model=to_anthropic, messages=PROMPT)
        message = completion.choices[0].message
        assert message.content == text, message
        assert getattr(message, "reasoning_content", None) == thinking, message
        assert completion.choices[0].finish_reason == "stop"
        return "reasoning_content + content"

    def openai_streamed() -> str:
        with gpt.chat.completions.stream(model=to_anthropic, messages=PROMPT) as stream:
            for _ in stream:
                pass
            completion = stream.get_final_completion()
        message = completion.choices[0].message
        assert message.content == text, message
        assert getattr(message, "reasoning_content", None) == thinking, message
        return "reasoning_content + content"

    def structured_whole() -> str:
        completion = gpt.chat.completions.parse(
            model=to_anthropic, messages=PROMPT, response_format=City
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, City), choice.message
        assert not choice.message.tool_calls, choice.message
        return repr(choice.message.parsed)

    def structured_streamed() -> str:
        with gpt.chat.completions.stream(
            model=to_anthropic, messages=PROMPT, response_format=City
        ) as stream:
            for _ in stream:
                pass
            completion = stream.get_final_completion()
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, City), choice.message
        return repr(choice.message.parsed)

    failed = 0
    checks = [
        ("anthropic sdk, whole answer from an openai upstream", anthropic_whole),
        ("anthropic sdk, stream from an openai upstream", anthropic_streamed),
        ("openai sdk, whole answer from an anthropic upstream", openai_whole),
        ("openai sdk, stream from an anthropic upstream", openai_streamed),
        ("openai sdk, structured output from an anthropic upstream", structured_whole),
        ("openai sdk, structured output streamed from an anthropic upstream", structured_streamed),
    ]
    for name, check in checks:
        try:
            print(f"ok   {name}: {check()}")
        except Exception:  # noqa: BLE001 - every failure is reported the same way
            failed += 1
            print(f"FAIL {name}:\n{traceback.format_exc()}")
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

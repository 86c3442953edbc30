"""The official `openai` SDK's stream accumulator rebuilds what a client gets of a continued
stream: one whole answer when a cut stream is continued on a target that truly continues, and
an error naming the cut, never a corrupted tool call, when it is cut inside a tool call.

Settings (environment):
    AISIX_SDK_BASE_URL   the gateway's OpenAI base URL (`http://host:port/v1`)
    AISIX_SDK_API_KEY    the client key
    AISIX_SDK_MODEL      the group to call
    AISIX_SDK_CASE       `continued` (expects AISIX_SDK_TEXT) or `tool-cut`
    AISIX_SDK_TEXT       the whole text a `continued` answer must rebuild to
"""

import json
import os
import sys

import openai
from openai import OpenAI


def main() -> None:
    client = OpenAI(
        base_url=os.environ["AISIX_SDK_BASE_URL"],
        api_key=os.environ["AISIX_SDK_API_KEY"],
        max_retries=0,
    )
    case = os.environ["AISIX_SDK_CASE"]
    messages = [{"role": "user", "content": "Say hello to the world"}]
    model = os.environ["AISIX_SDK_MODEL"]
    if case == "continued":
        with client.chat.completions.stream(model=model, messages=messages) as stream:
            final = stream.get_final_completion()
        text = final.choices[0].message.content
        expected = os.environ["AISIX_SDK_TEXT"]
        if text != expected:
            sys.exit(f"the accumulator rebuilt {text!r}, expected {expected!r}")
        if final.choices[0].finish_reason != "stop":
            sys.exit(f"finish_reason {final.choices[0].finish_reason!r}")
        print("continued: one whole answer")
    elif case == "tool-cut":
        try:
            with client.chat.completions.stream(model=model, messages=messages) as stream:
                final = stream.get_final_completion()
        except openai.APIError as error:
            if "inside a tool call" not in str(error):
                sys.exit(f"the error does not name the cut: {error}")
            print(f"tool-cut: the client is told of the cut: {error}")
            return
        for call in final.choices[0].message.tool_calls or []:
            json.loads(call.function.arguments)
        sys.exit(f"the stream ended without an error: {final}")
    else:
        sys.exit(f"unknown case {case!r}")


if __name__ == "__main__":
    main()

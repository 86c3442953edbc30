"""The official `anthropic` SDK's message stream rebuilds what a client gets of a continued
stream: one whole message when a cut stream is continued on a target that truly continues
(Anthropic's prefill), and an error naming the cut, never a corrupted tool call, when it is
cut inside a tool call.

Settings (environment):
    AISIX_SDK_BASE_URL   the gateway's origin (`http://host:port`)
    AISIX_SDK_API_KEY    the client key
    AISIX_SDK_MODEL      the group to call
    AISIX_SDK_CASE       `continued` (expects AISIX_SDK_TEXT) or `tool-cut`
    AISIX_SDK_TEXT       the whole text a `continued` message must rebuild to
"""

import json
import os
import sys

import anthropic
from anthropic import Anthropic


def main() -> None:
    client = Anthropic(
        base_url=os.environ["AISIX_SDK_BASE_URL"],
        api_key=os.environ["AISIX_SDK_API_KEY"],
        max_retries=0,
    )
    case = os.environ["AISIX_SDK_CASE"]
    request = {
        "model": os.environ["AISIX_SDK_MODEL"],
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Say hello to the world"}],
    }
    if case == "continued":
        with client.messages.stream(**request) as stream:
            final = stream.get_final_message()
        text = "".join(block.text for block in final.content if block.type == "text")
        expected = os.environ["AISIX_SDK_TEXT"]
        if text != expected:
            sys.exit(f"the stream rebuilt {text!r}, expected {expected!r}")
        if len(final.content) != 1:
            sys.exit(f"one text block expected: {final.content}")
        if final.stop_reason != "end_turn":
            sys.exit(f"stop_reason {final.stop_reason!r}")
        print("continued: one whole message")
    elif case == "tool-cut":
        try:
            with client.messages.stream(**request) as stream:
                final = stream.get_final_message()
        except anthropic.APIError as error:
            if "inside a tool call" not in str(error):
                sys.exit(f"the error does not name the cut: {error}")
            print(f"tool-cut: the client is told of the cut: {error}")
            return
        for block in final.content:
            if block.type == "tool_use":
                json.dumps(block.input)
        sys.exit(f"the stream ended without an error: {final}")
    else:
        sys.exit(f"unknown case {case!r}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Drives an aisix gateway with the official `openai` Python SDK and checks what the SDK sees.

Prints one line per check and exits 0 when every check passed, 1 when one failed, 2 when it
could not run at all. Configuration comes from the command line or the environment:

    AISIX_SDK_BASE_URL          gateway base URL with /v1, e.g. http://127.0.0.1:8080/v1 (argv 1)
    AISIX_SDK_API_KEY           a gateway API key (argv 2)
    AISIX_SDK_CHAT_MODEL        a chat model the key may use
    AISIX_SDK_EMBED_MODEL       an embedding model the key may use
    AISIX_SDK_COMPLETION_MODEL  a model for legacy completions (default: the chat model)
    AISIX_SDK_HIDDEN_MODEL      a model the gateway serves but the key may not use
    AISIX_SDK_EMBED_ENCODING    "sdk" (default: the SDK asks for base64 and decodes it), "float"
                                or "base64" (asked for explicitly; the script decodes it)
    AISIX_SDK_DETERMINISTIC     "1" (default): the upstream answers the same text every time,
                                so a streamed answer must equal the non-streamed one; "0" for a
                                real model
    AISIX_SDK_TIMEOUT           seconds per request (default 30)

Set up the interpreter with `bash scripts/setup-python.sh`, then for example:

    target/e2e-venv/bin/python e2e/python/test_openai_sdk.py http://127.0.0.1:8080/v1 sk-aisix-demo
"""

from __future__ import annotations

import argparse
import array
import base64
import json
import os
import sys
import traceback
from typing import Callable, List, Optional

try:
    import openai
except ImportError:  # pragma: no cover - depends on the environment
    print(
        "the `openai` package is missing: run `bash scripts/setup-python.sh` and use "
        "target/e2e-venv/bin/python",
        file=sys.stderr,
    )
    sys.exit(2)

PROMPT = [{"role": "user", "content": "Say hello to the gateway."}]


class CheckFailed(Exception):
    """An expectation about the gateway's answer did not hold."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def expect_status_error(
    call: Callable[[], object], error_type: type, status: int, code: Optional[str] = None
) -> str:
    """Runs `call`, which must raise `error_type` with HTTP `status` and an OpenAI error body."""
    try:
        result = call()
    except error_type as error:  # type: ignore[misc]
        expect(
            error.status_code == status,
            f"expected HTTP {status}, got {error.status_code}: {error.body!r}",
        )
        expect(
            isinstance(error.body, dict) and bool(error.body.get("message")),
            f"expected an OpenAI error object with a message, got body {error.body!r}",
        )
        if code is not None:
            expect(
                error.code == code,
                f"expected error code {code!r}, got {error.code!r}: {error.body!r}",
            )
        return f"{type(error).__name__} {error.status_code} code={error.code}"
    except openai.APIStatusError as error:
        raise CheckFailed(
            f"expected {error_type.__name__} (HTTP {status}), got {type(error).__name__} "
            f"(HTTP {error.status_code}): {error.body!r}"
        ) from error
    raise CheckFailed(f"expected {error_type.__name__} (HTTP {status}), got a success: {result!r}")


def floats(embedding: object, encoding: str) -> List[float]:
    """The vector of one embedding, decoding base64 when it was asked for explicitly."""
    if encoding == "base64":
        expect(
            isinstance(embedding, str),
            f"asked for base64, got {type(embedding).__name__}",
        )
        raw = base64.b64decode(embedding)  # type: ignore[arg-type]
        expect(len(raw) % 4 == 0, f"base64 embedding of {len(raw)} bytes is not float32s")
        return array.array("f", raw).tolist()
    expect(
        isinstance(embedding, list),
        f"expected a list of floats, got {type(embedding).__name__}: {embedding!r:.80}",
    )
    return embedding  # type: ignore[return-value]


class Suite:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client = openai.OpenAI(
            base_url=args.base_url,
            api_key=args.api_key,
            max_retries=0,
            timeout=args.timeout,
        )
        self.passed = 0
        self.failed = 0
        # The non-streamed answer, to compare the streamed ones with.
        self.chat_text: Optional[str] = None

    def run(self, name: str, check: Callable[[], str]) -> None:
        try:
            detail = check()
        except CheckFailed as failure:
            self.failed += 1
            print(f"FAIL {name}: {failure}", flush=True)
        except openai.APIError as error:
            # The gateway answered with an error, or the SDK could not read its answer.
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

    def chat(self) -> str:
        response = self.client.chat.completions.create(model=self.args.chat_model, messages=PROMPT)
        expect(response.object == "chat.completion", f"object is {response.object!r}")
        expect(bool(response.model), "`model` is empty")
        expect(len(response.choices) >= 1, "no choices")
        content = response.choices[0].message.content
        expect(bool(content), f"choices[0].message.content is empty: {response!r}")
        expect(response.choices[0].message.role == "assistant", "role is not assistant")
        expect(response.choices[0].finish_reason is not None, "finish_reason is missing")
        expect(response.usage is not None, "usage is missing")
        expect(response.usage.total_tokens > 0, f"total_tokens is {response.usage.total_tokens}")
        self.chat_text = content
        return f"model={response.model} tokens={response.usage.total_tokens} {content!r}"

    def stream_text(self, chunks: list) -> str:
        text = ""
        for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text

    def expect_same_text(self, streamed: str) -> None:
        expect(bool(streamed), "the streamed deltas carry no content")
        if self.args.deterministic and self.chat_text is not None:
            expect(
                streamed == self.chat_text,
                f"streamed text {streamed!r} differs from the non-streamed {self.chat_text!r}",
            )

    def chat_stream(self) -> str:
        stream = self.client.chat.completions.create(
            model=self.args.chat_model, messages=PROMPT, stream=True
        )
        chunks = list(stream)
        expect(len(chunks) > 0, "the stream had no chunks")
        for i, chunk in enumerate(chunks):
            expect(chunk.object == "chat.completion.chunk", f"chunk {i} object: {chunk.object!r}")
            # Without stream_options.include_usage, OpenAI sends no usage-only chunk: a client
            # that reads chunk.choices[0] must never see an empty choices list.
            expect(len(chunk.choices) >= 1, f"chunk {i} has no choices: {chunk!r}")
            expect(chunk.usage is None, f"chunk {i} carries unasked-for usage: {chunk.usage!r}")
        expect(
            any(c.choices[0].finish_reason for c in chunks),
            "no chunk carries a finish_reason",
        )
        text = self.stream_text(chunks)
        self.expect_same_text(text)
        return f"{len(chunks)} chunks {text!r}"

    def chat_stream_usage(self) -> str:
        stream = self.client.chat.completions.create(
            model=self.args.chat_model,
            messages=PROMPT,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        expect(len(chunks) >= 2, f"expected content chunks and a usage chunk, got {len(chunks)}")
        last = chunks[-1]
        expect(last.usage is not None, f"the final chunk has no usage: {last!r}")
        expect(last.usage.total_tokens > 0, f"final total_tokens is {last.usage.total_tokens}")
        expect(last.choices == [], f"the usage chunk has choices: {last.choices!r}")
        for i, chunk in enumerate(chunks[:-1]):
            expect(chunk.usage is None, f"chunk {i} (not the last) carries usage: {chunk.usage!r}")
        text = self.stream_text(chunks)
        self.expect_same_text(text)
        return f"{len(chunks)} chunks, usage total_tokens={last.usage.total_tokens}"

    def chat_stream_raw(self) -> str:
        """The SSE lines as the SDK's HTTP client read them: JSON events, the usage chunk last,
        then exactly one `data: [DONE]` with nothing after it."""
        with self.client.chat.completions.with_streaming_response.create(
            model=self.args.chat_model,
            messages=PROMPT,
            stream=True,
            stream_options={"include_usage": True},
        ) as response:
            content_type = response.headers.get("content-type", "")
            lines = [line for line in response.iter_lines() if line]
        expect(
            content_type.startswith("text/event-stream"), f"content-type is {content_type!r}"
        )
        # Lines starting with ':' are comments (keep-alives); anything else must be data.
        fields = [line for line in lines if not line.startswith(":")]
        others = [line for line in fields if not line.startswith("data:")]
        expect(not others, f"the stream has fields other than data: {others!r}")
        data = [line[len("data:") :].lstrip(" ") for line in fields]
        expect(len(data) >= 2, f"expected events and [DONE], got {data!r}")
        expect(data[-1] == "[DONE]", f"the stream does not end with data: [DONE]: {data[-2:]!r}")
        expect(data.count("[DONE]") == 1, f"[DONE] came {data.count('[DONE]')} times")
        events = [json.loads(item) for item in data[:-1]]
        expect(
            bool(events[-1].get("usage")) and events[-1].get("choices") == [],
            f"the event before [DONE] is not the usage chunk: {events[-1]!r}",
        )
        return f"{len(events)} events, then data: [DONE]"

    def embeddings(self) -> str:
        encoding = self.args.embed_encoding
        kwargs = {} if encoding == "sdk" else {"encoding_format": encoding}
        response = self.client.embeddings.create(
            model=self.args.embed_model, input=["a", "b"], **kwargs
        )
        expect(len(response.data) == 2, f"expected 2 embeddings, got {len(response.data)}")
        vectors = []
        for i, item in enumerate(response.data):
            expect(item.index == i, f"data[{i}].index is {item.index}")
            vector = floats(item.embedding, encoding)
            expect(len(vector) > 0, f"embedding {i} is empty")
            expect(
                all(isinstance(x, float) for x in vector),
                f"embedding {i} holds non-floats: {vector!r:.80}",
            )
            vectors.append(vector)
        expect(len(vectors[0]) == len(vectors[1]), "the two embeddings differ in length")
        expect(vectors[0] != vectors[1], "'a' and 'b' got the same embedding")
        expect(response.usage.total_tokens > 0, f"total_tokens is {response.usage.total_tokens}")
        return f"encoding={encoding} 2 x {len(vectors[0])} floats"

    def models(self) -> str:
        ids = [model.id for model in self.client.models.list()]
        allowed = {self.args.chat_model, self.args.embed_model, self.args.completion_model}
        missing = sorted(allowed - set(ids))
        expect(not missing, f"models {missing} the key may use are not listed in {ids}")
        hidden = self.args.hidden_model
        if hidden:
            expect(hidden not in ids, f"{hidden!r}, which the key may not use, is listed in {ids}")
        model = self.client.models.retrieve(self.args.chat_model)
        expect(model.id == self.args.chat_model, f"models.retrieve gave id {model.id!r}")
        return f"{ids}"

    def hidden_model_is_not_retrievable(self) -> str:
        return expect_status_error(
            lambda: self.client.models.retrieve(self.args.hidden_model),
            openai.NotFoundError,
            404,
        )

    def wrong_key(self) -> str:
        stranger = openai.OpenAI(
            base_url=self.args.base_url,
            api_key="sk-not-a-key-of-this-gateway",
            max_retries=0,
            timeout=self.args.timeout,
        )
        return expect_status_error(
            lambda: stranger.chat.completions.create(model=self.args.chat_model, messages=PROMPT),
            openai.AuthenticationError,
            401,
        )

    def unknown_model(self) -> str:
        return expect_status_error(
            lambda: self.client.chat.completions.create(
                model="no-such-model-anywhere", messages=PROMPT
            ),
            openai.NotFoundError,
            404,
            code="model_not_found",
        )

    def hidden_model_is_unknown(self) -> str:
        # Answered exactly as a model that does not exist, so a key cannot learn which do.
        return expect_status_error(
            lambda: self.client.chat.completions.create(
                model=self.args.hidden_model, messages=PROMPT
            ),
            openai.NotFoundError,
            404,
            code="model_not_found",
        )

    def completion(self) -> str:
        response = self.client.completions.create(model=self.args.completion_model, prompt="hi")
        expect(response.object == "text_completion", f"object is {response.object!r}")
        expect(len(response.choices) >= 1, "no choices")
        text = response.choices[0].text
        expect(bool(text), f"choices[0].text is empty: {response!r}")
        usage = response.usage
        expect(usage is not None and usage.total_tokens > 0, f"usage is {usage!r}")
        return f"tokens={response.usage.total_tokens} {text!r}"

    def completion_stream(self) -> str:
        stream = self.client.completions.create(
            model=self.args.completion_model, prompt="hi", stream=True
        )
        chunks = list(stream)
        for i, chunk in enumerate(chunks):
            # No usage was asked for, so no usage-only chunk without choices may come.
            expect(len(chunk.choices) >= 1, f"chunk {i} has no choices: {chunk!r}")
        text = "".join(chunk.choices[0].text for chunk in chunks)
        expect(bool(text), "the streamed chunks carry no text")
        return f"{len(chunks)} chunks {text!r}"

    def all(self) -> int:
        self.run("chat.completions.create", self.chat)
        self.run("chat.completions.create stream", self.chat_stream)
        self.run("chat.completions.create stream include_usage", self.chat_stream_usage)
        self.run("chat.completions stream, raw SSE ends with data: [DONE]", self.chat_stream_raw)
        self.run("embeddings.create", self.embeddings)
        self.run("models.list", self.models)
        self.run("wrong api key is AuthenticationError 401", self.wrong_key)
        self.run("unknown model is NotFoundError 404", self.unknown_model)
        if self.args.hidden_model:
            self.run(
                "models.retrieve of a model the key may not use is NotFoundError 404",
                self.hidden_model_is_not_retrievable,
            )
            self.run(
                "chat with a model the key may not use is NotFoundError 404",
                self.hidden_model_is_unknown,
            )
        self.run("completions.create", self.completion)
        self.run("completions.create stream", self.completion_stream)
        total = self.passed + self.failed
        print(
            f"openai-sdk {openai.__version__}: {self.passed} of {total} checks passed",
            flush=True,
        )
        return 0 if self.failed == 0 else 1


def parse_args(argv: List[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("base_url", nargs="?", default=env("AISIX_SDK_BASE_URL"))
    parser.add_argument("api_key", nargs="?", default=env("AISIX_SDK_API_KEY"))
    parser.add_argument("--chat-model", default=env("AISIX_SDK_CHAT_MODEL"))
    parser.add_argument("--embed-model", default=env("AISIX_SDK_EMBED_MODEL"))
    parser.add_argument("--completion-model", default=env("AISIX_SDK_COMPLETION_MODEL"))
    parser.add_argument("--hidden-model", default=env("AISIX_SDK_HIDDEN_MODEL"))
    parser.add_argument(
        "--embed-encoding",
        choices=["sdk", "float", "base64"],
        default=env("AISIX_SDK_EMBED_ENCODING") or "sdk",
    )
    parser.add_argument(
        "--deterministic",
        choices=["0", "1"],
        default=env("AISIX_SDK_DETERMINISTIC") or "1",
    )
    parser.add_argument("--timeout", type=float, default=float(env("AISIX_SDK_TIMEOUT") or 30))
    args = parser.parse_args(argv)
    missing = [
        name
        for name, value in [
            ("base URL (AISIX_SDK_BASE_URL)", args.base_url),
            ("API key (AISIX_SDK_API_KEY)", args.api_key),
            ("chat model (AISIX_SDK_CHAT_MODEL)", args.chat_model),
            ("embedding model (AISIX_SDK_EMBED_MODEL)", args.embed_model),
        ]
        if not value
    ]
    if missing:
        parser.error("missing " + ", ".join(missing))
    args.completion_model = args.completion_model or args.chat_model
    args.deterministic = args.deterministic == "1"
    return args


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    print(f"openai-sdk {openai.__version__} against {args.base_url}", flush=True)
    return Suite(args).all()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A small OpenAI-compatible provider as a plain ASGI app, for the conformance matrix.

Real ASGI servers (uvicorn with h11 or httptools, hypercorn over TLS with HTTP/2) serve it as an
upstream of the gateway; the Rust test `e2e/tests/conformance.rs` starts them. It answers:

    POST /v1/chat/completions   JSON, or SSE with `stream: true` (usage chunk when
                                `stream_options.include_usage`), ending with `data: [DONE]`
    POST /v1/completions        the same for legacy completions
    POST /v1/embeddings         float vectors, or base64 float32 with `encoding_format: base64`
    GET  /v1/models             the model list

and refuses anything else in OpenAI's error envelope. Answers are deterministic, so a streamed
answer equals the non-streamed one.

Settings come from the environment:

    CONFORMANCE_API_KEY   the only key accepted (`Authorization: Bearer <key>`); others get 401
    CONFORMANCE_RECORD    a file that gets one JSON line per event: `{"type": "startup", ...}`
                          when the server has started the app, and `{"type": "request", ...}`
                          per request with what the server handed over: HTTP version, scheme,
                          method, path, query, headers, client address and the parsed body
"""

from __future__ import annotations

import base64
import json
import os
import struct
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The answer, one piece per streamed delta.
REPLY_PIECES = ["Hello", " from", " a", " real", " ASGI", " server."]
REPLY_TEXT = "".join(REPLY_PIECES)
EMBEDDING_DIM = 4
MODELS = ["gpt-4o", "gpt-4o-mini", "text-embedding-3-small"]
CREATED = 1_700_000_000

_record_file = None


def record(event: Dict[str, Any]) -> None:
    """Appends one JSON line to CONFORMANCE_RECORD, flushed at once so the test can read it."""
    global _record_file
    path = os.environ.get("CONFORMANCE_RECORD")
    if not path:
        return
    if _record_file is None:
        _record_file = open(path, "a", encoding="utf-8")
    _record_file.write(json.dumps(event, sort_keys=True) + "\n")
    _record_file.flush()


def headers_of(scope: Scope) -> Dict[str, str]:
    """Lowercase name -> value; repeated headers are joined with ", "."""
    headers: Dict[str, str] = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def error(status: int, message: str, error_type: str, code: Optional[str]) -> Tuple[int, Any]:
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return status, body


def usage(body: Dict[str, Any], completion_tokens: int) -> Dict[str, int]:
    """Prompt tokens are the words of the prompt text, at least 1."""
    texts: List[str] = []
    for message in body.get("messages") or []:
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            texts.append(message["content"])
    for key in ("prompt", "input"):
        value = body.get(key)
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            texts.extend(item for item in value if isinstance(item, str))
    prompt_tokens = max(1, sum(len(text.split()) for text in texts))
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat(body: Dict[str, Any], model: str) -> Tuple[int, Any]:
    if not body.get("stream"):
        return 200, {
            "id": "chatcmpl-asgi",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY_TEXT, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage(body, len(REPLY_PIECES)),
        }

    def chunk(delta: Dict[str, Any], finish_reason: Optional[str]) -> Dict[str, Any]:
        return {
            "id": "chatcmpl-asgi",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }

    events = [chunk({"role": "assistant", "content": ""}, None)]
    events += [chunk({"content": piece}, None) for piece in REPLY_PIECES]
    events.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        final = chunk({}, None)
        final["choices"] = []
        final["usage"] = usage(body, len(REPLY_PIECES))
        events.append(final)
    return 200, events


def completion(body: Dict[str, Any], model: str) -> Tuple[int, Any]:
    def chunk(text: str, finish_reason: Optional[str]) -> Dict[str, Any]:
        return {
            "id": "cmpl-asgi",
            "object": "text_completion",
            "created": CREATED,
            "model": model,
            "choices": [
                {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}
            ],
        }

    if not body.get("stream"):
        answer = chunk(REPLY_TEXT, "stop")
        answer["usage"] = usage(body, len(REPLY_PIECES))
        return 200, answer
    events = [chunk(piece, None) for piece in REPLY_PIECES] + [chunk("", "stop")]
    if (body.get("stream_options") or {}).get("include_usage"):
        final = chunk("", None)
        final["choices"] = []
        final["usage"] = usage(body, len(REPLY_PIECES))
        events.append(final)
    return 200, events


def embeddings(body: Dict[str, Any], model: str) -> Tuple[int, Any]:
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        return error(400, "`input` must be a string or a list", "invalid_request_error", None)
    encoding = body.get("encoding_format") or "float"
    data = []
    for index, item in enumerate(inputs):
        # A vector that differs per input, so a client can tell them apart.
        seed = sum(str(item).encode()) + index
        vector = [((seed * (i + 1)) % 97) / 97.0 for i in range(EMBEDDING_DIM)]
        if encoding == "base64":
            packed = struct.pack(f"<{EMBEDDING_DIM}f", *vector)
            embedding: Any = base64.b64encode(packed).decode("ascii")
        else:
            embedding = vector
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = usage(body, 0)
    return 200, {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens["prompt_tokens"], "total_tokens": tokens["total_tokens"]},
    }


def models() -> Tuple[int, Any]:
    data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "asgi"} for m in MODELS]
    return 200, {"object": "list", "data": data}


ROUTES = {
    "/v1/chat/completions": chat,
    "/v1/completions": completion,
    "/v1/embeddings": embeddings,
}


def answer(scope: Scope, headers: Dict[str, str], body: Any) -> Tuple[int, Any]:
    """The status and JSON answer (a list of SSE events for a stream) to one request."""
    key = os.environ.get("CONFORMANCE_API_KEY", "")
    if headers.get("authorization") != f"Bearer {key}":
        return error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
    method, path = scope["method"], scope["path"]
    if method == "GET" and path == "/v1/models":
        return models()
    route = ROUTES.get(path)
    if method != "POST" or route is None:
        return error(404, f"Unknown request URL: {method} {path}.", "invalid_request_error", "unknown_url")
    if not isinstance(body, dict):
        return error(400, "We could not parse the JSON body of your request.", "invalid_request_error", None)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return error(400, "you must provide a model parameter", "invalid_request_error", None)
    return route(body, model)


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            record({"type": "startup", "pid": os.getpid()})
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    raw = await read_body(receive)
    headers = headers_of(scope)
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    client = scope.get("client")
    record(
        {
            "type": "request",
            "http_version": scope["http_version"],
            "scheme": scope["scheme"],
            "method": scope["method"],
            "path": scope["path"],
            "query": scope["query_string"].decode("latin-1"),
            "headers": headers,
            "client": f"{client[0]}:{client[1]}" if client else None,
            "body_bytes": len(raw),
            "body": body,
        }
    )
    status, payload = answer(scope, headers, body)
    if isinstance(payload, list):
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            }
        )
        for event in payload:
            data = f"data: {json.dumps(event)}\n\n".encode()
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        return
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})

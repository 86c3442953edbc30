"""A small Vertex AI as a plain ASGI app: Google's OAuth2 token endpoint for a service account,
and the Gemini and Anthropic publisher endpoints under a project and location.

uvicorn serves it as the gateway's `vertex` provider in `e2e/tests/vertex_gateway.rs`.

At startup it generates an RSA key pair and writes a service-account JSON key file
(`sa.json` in its working directory) whose `token_uri` is its own `/token`; the gateway is
pointed at that file.

    POST /token     form `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT`:
                    the assertion is verified with PyJWT against the public key (RS256, `kid`,
                    `iss` the account, `aud` the token_uri, `scope` cloud-platform, at most an
                    hour of life); a good one gets `{"access_token", "expires_in", "token_type"}`,
                    a bad one 400 `invalid_grant`, as Google answers.
    POST /v1/projects/{project}/locations/{location}/publishers/google/models/{m}:generateContent
         ...:streamGenerateContent?alt=sse
                    handed to the Gemini mock (gemini_asgi_app.py), which validates the body
                    with the google-genai SDK's types and answers through them.
    POST /v1/projects/{project}/locations/{location}/publishers/google/models/{m}:predict
                    a text-embedding model: the body must be exactly what google-genai's own
                    Vertex converter (`_EmbedContentParametersPrivate_to_vertex`) builds for its
                    texts and `outputDimensionality` (else 400 INVALID_ARGUMENT); the answer,
                    `predictions[].embeddings {values, statistics {token_count, truncated}}`
                    (tokens counted in words), must read back through the SDK's
                    `_EmbedContentResponse_from_vertex` into an `EmbedContentResponse`.
         ...:countTokens
                    Vertex's CountTokensRequest (`contents`, `systemInstruction`, `tools`,
                    `generationConfig` at the top level; no `toolConfig`), each checked with the
                    SDK's types; `{"totalTokens": n}` in words.
    POST /v1/projects/{project}/locations/{location}/publishers/anthropic/models/{m}:rawPredict
         ...:streamRawPredict
                    an Anthropic Messages body without `model` and with
                    `anthropic_version: "vertex-2023-10-16"`; answers (and each stream event)
                    are validated by the `anthropic` SDK's own types before they are sent.
    POST /v1/projects/{project}/locations/{location}/publishers/anthropic/models/count-tokens:rawPredict
                    Anthropic's count_tokens body with its `model` and Vertex's
                    `anthropic_version`, checked with the SDK's `MessageCountTokensParams`;
                    `{"input_tokens": n}` in words.

Every publisher call needs `Authorization: Bearer <a token this app issued and that has not
expired>`, else 401 UNAUTHENTICATED, as Vertex answers. A wrong project or location is 404.
What an Anthropic model "says": "[429]" in the last user text is Vertex's own 429
RESOURCE_EXHAUSTED (Google's envelope), "[529]" Anthropic's 529 overloaded_error, a declared tool
without a result a `tool_use` of the first tool, a tool result "The tool said: <result>", an
`output_format` or a forced tool named `json` (what a JSON mode request becomes) a JSON object,
an image block "I see <media_type>.", otherwise "Hello from Claude on Vertex."

Settings come from the environment:

    VERTEX_PROJECT, VERTEX_LOCATION   the only project and location served
    VERTEX_TOKEN_LIFETIME             the tokens' `expires_in`, in seconds (default 3600)
    VERTEX_TOKEN_DELAY                seconds the token endpoint waits before answering
    VERTEX_RECORD                     one JSON line per event: `startup`, `token` (each token
                                      request: `ok`, the token issued or the `problem`),
                                      `vertex` (each publisher call: path, token, status,
                                      `invalid`); the Gemini mock adds its `request` lines
    a file `token_fail` in the working directory: while it exists, the token endpoint answers
    503 (an outage), so refreshes fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.parse
from typing import Any, Dict, List, Tuple

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import TypeAdapter

import anthropic.types as atypes
import gemini_asgi_app
from google.genai import _common as genai_common
from google.genai import models as genai_models
from google.genai import types as gtypes

GEMINI_KEY = "vertex-delegated-gemini-key"
os.environ["GEMINI_API_KEY"] = GEMINI_KEY
os.environ.setdefault("GEMINI_RECORD", os.environ.get("VERTEX_RECORD", ""))

KEY_ID = "mock-key-1"
CLIENT_EMAIL = "gateway@mock-project.iam.gserviceaccount.com"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ANTHROPIC_VERSION = "vertex-2023-10-16"
ANTHROPIC_FIELDS = {"anthropic_version", "messages", "max_tokens", "system", "stream", "temperature",
                    "top_p", "top_k", "stop_sequences", "tools", "tool_choice", "metadata", "thinking"}

_public_key = None
_token_uri = ""
_tokens: Dict[str, float] = {}
_issued = 0
_stream_event = TypeAdapter(atypes.RawMessageStreamEvent)


def record(event: Dict[str, Any]) -> None:
    gemini_asgi_app.record(event)


def startup(port: int) -> None:
    global _public_key, _token_uri
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _public_key = key.public_key()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    _token_uri = f"http://127.0.0.1:{port}/token"
    account = {"type": "service_account", "project_id": os.environ.get("VERTEX_PROJECT"),
               "private_key_id": KEY_ID, "private_key": pem, "client_email": CLIENT_EMAIL,
               "client_id": "1", "token_uri": _token_uri}
    with open("sa.json", "w", encoding="utf-8") as f:
        json.dump(account, f)


def google_error(code: int, status: str, message: str) -> Tuple[int, Dict[str, Any]]:
    return code, {"error": {"code": code, "message": message, "status": status}}


def anthropic_error(code: int, kind: str, message: str) -> Tuple[int, Dict[str, Any]]:
    return code, {"type": "error", "error": {"type": kind, "message": message}}


def check_assertion(form: Dict[str, List[str]]) -> str:
    """Why the assertion is refused, or "" when it is good."""
    if form.get("grant_type") != [GRANT]:
        return f"grant_type must be {GRANT}"
    assertion = (form.get("assertion") or [""])[0]
    try:
        header = jwt.get_unverified_header(assertion)
        claims = jwt.decode(assertion, _public_key, algorithms=["RS256"], audience=_token_uri,
                            options={"require": ["iss", "aud", "iat", "exp"]})
    except jwt.PyJWTError as error:
        return f"Invalid JWT: {error}"
    if header.get("kid") != KEY_ID:
        return "kid is not the key's id"
    if claims.get("iss") != CLIENT_EMAIL:
        return "iss is not the service account"
    if claims.get("scope") != SCOPE:
        return "scope is not cloud-platform"
    if claims["exp"] - claims["iat"] > 3600:
        return "Invalid JWT: Token must be a short-lived token (60 minutes)"
    return ""


async def token(raw: bytes, send) -> None:
    global _issued
    delay = float(os.environ.get("VERTEX_TOKEN_DELAY", "0"))
    if delay:
        await asyncio.sleep(delay)
    entry: Dict[str, Any] = {"type": "token"}
    if os.path.exists("token_fail"):
        entry.update(ok=False, problem="outage")
        record(entry)
        return await send_json(send, 503, {"error": "internal_failure", "error_description": "Backend Error"})
    problem = check_assertion(urllib.parse.parse_qs(raw.decode()))
    if problem:
        entry.update(ok=False, problem=problem)
        record(entry)
        return await send_json(send, 400, {"error": "invalid_grant", "error_description": problem})
    _issued += 1
    lifetime = int(os.environ.get("VERTEX_TOKEN_LIFETIME", "3600"))
    issued = f"ya29.mock-token-{_issued}"
    _tokens[issued] = time.monotonic() + lifetime
    entry.update(ok=True, token=issued)
    record(entry)
    await send_json(send, 200, {"access_token": issued, "expires_in": lifetime, "token_type": "Bearer"})


def words(text: str) -> int:
    return len(text.split())


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def check_messages(body: Any, stream: bool) -> str:
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if "model" in body:
        return "model: Extra inputs are not permitted (the model is the URL's on Vertex AI)"
    if body.get("anthropic_version") != ANTHROPIC_VERSION:
        return f"anthropic_version: must be {ANTHROPIC_VERSION!r}"
    unknown = set(body) - ANTHROPIC_FIELDS
    if unknown:
        return f"{sorted(unknown)[0]}: Extra inputs are not permitted"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    if not body.get("messages"):
        return "messages: Field required"
    if bool(body.get("stream")) != stream:
        return "stream must be true on streamRawPredict and absent or false on rawPredict"
    return ""


def claude_answer(body: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], str]:
    last = body["messages"][-1]
    content = last.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    results = [b for b in blocks if b.get("type") == "tool_result"]
    images = [b for b in blocks if b.get("type") == "image"]
    tools = body.get("tools") or []
    choice = body.get("tool_choice") or {}
    if tools and not results:
        # A forced tool is the one called; its input follows its schema's first fields.
        tool = next((t for t in tools if choice.get("type") == "tool" and t["name"] == choice.get("name")), tools[0])
        props = (tool.get("input_schema") or {}).get("properties") or {}
        given = {"name": "Ada", "age": 36} if "name" in props else {"city": "Paris"}
        return [{"type": "tool_use", "id": "toolu_vertex_1", "name": tool["name"], "input": given}], "tool_use"
    if results:
        said = results[0].get("content")
        said = said if isinstance(said, str) else text_of(said)
        return [{"type": "text", "text": f"The tool said: {said}"}], "end_turn"
    if images:
        return [{"type": "text", "text": f"I see {images[0]['source']['media_type']}."}], "end_turn"
    return [{"type": "text", "text": "Hello from Claude on Vertex."}], "end_turn"


class _VertexClient:
    """What google-genai's converters ask of their client: only whether it is Vertex's."""
    vertexai = True


def check_predict(body: Any, model: str) -> str:
    """Why a `:predict` body is not the one google-genai's own Vertex converter builds for its
    texts and dimensions, or "" when it is."""
    if not isinstance(body, dict) or not isinstance(body.get("instances"), list) or not body["instances"]:
        return "instances: Field required"
    texts = [i.get("content") if isinstance(i, dict) else None for i in body["instances"]]
    if not all(isinstance(t, str) and t for t in texts):
        return "instances[].content: must be a non-empty string"
    dims = (body.get("parameters") or {}).get("outputDimensionality")
    config = gtypes.EmbedContentConfig(output_dimensionality=dims) if dims is not None else None
    params = gtypes._EmbedContentParametersPrivate(model=model, contents=texts, config=config)
    expected = genai_models._EmbedContentParametersPrivate_to_vertex(_VertexClient(), params, None, params)
    expected.pop("_url", None)
    expected.pop("config", None)
    expected = genai_common.convert_to_dict(expected)
    if expected != body:
        return f"Invalid JSON payload received: {json.dumps(body, sort_keys=True)} is not {json.dumps(expected, sort_keys=True)}"
    return ""


def predict_answer(body: Dict[str, Any], model: str) -> Dict[str, Any]:
    dims = (body.get("parameters") or {}).get("outputDimensionality") or 4
    predictions = []
    for instance in body["instances"]:
        seed = words(instance["content"])
        predictions.append({"embeddings": {"values": [float(seed + j) / 8 for j in range(dims)],
                                           "statistics": {"token_count": seed, "truncated": False}}})
    answer = {"predictions": predictions, "metadata": {"billableCharacterCount": sum(len(i["content"]) for i in body["instances"])}}
    # The answer must read back as google-genai reads Vertex's.
    params = gtypes._EmbedContentParametersPrivate(model=model, contents=[i["content"] for i in body["instances"]])
    read = gtypes.EmbedContentResponse._from_response(
        response=genai_models._EmbedContentResponse_from_vertex(answer, None, params), kwargs={})
    assert [e.statistics.token_count for e in read.embeddings] == [p["embeddings"]["statistics"]["token_count"] for p in predictions]
    return answer


VERTEX_COUNT_FIELDS = {"contents", "systemInstruction", "tools", "generationConfig", "model", "instances"}


def check_count_tokens(body: Any) -> str:
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    unknown = set(body) - VERTEX_COUNT_FIELDS
    if unknown:
        return f"Invalid JSON payload received. Unknown name {sorted(unknown)[0]!r}"
    problem, _, _, _ = gemini_asgi_app.validate_generate({k: v for k, v in body.items() if k not in ("model", "instances")})
    return problem or ""


def count_words(body: Dict[str, Any]) -> int:
    contents = [gtypes.Content.model_validate(c) for c in body["contents"]]
    prompt = " ".join(gemini_asgi_app.texts(c) for c in contents)
    if "systemInstruction" in body:
        prompt += " " + gemini_asgi_app.texts(gtypes.Content.model_validate(body["systemInstruction"]))
    return words(prompt)


ANTHROPIC_COUNT_FIELDS = {"anthropic_version", "model", "messages", "system", "tools", "tool_choice", "thinking"}


def check_claude_count(body: Any) -> str:
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if body.get("anthropic_version") != ANTHROPIC_VERSION:
        return f"anthropic_version: must be {ANTHROPIC_VERSION!r}"
    if not isinstance(body.get("model"), str) or not body["model"].startswith("claude"):
        return "model: Field required (the token counter's URL names no model)"
    unknown = set(body) - ANTHROPIC_COUNT_FIELDS
    if unknown:
        return f"{sorted(unknown)[0]}: Extra inputs are not permitted"
    try:
        TypeAdapter(atypes.MessageCountTokensParams).validate_python({k: v for k, v in body.items() if k != "anthropic_version"})
    except Exception as error:  # pydantic's ValidationError, as the API's 400 says it
        return str(error)
    if not body.get("messages"):
        return "messages: Field required"
    return ""


def prompt_words(body: Dict[str, Any]) -> int:
    system = body.get("system") or ""
    system = system if isinstance(system, str) else text_of(system)
    return max(words(system) + sum(words(text_of(m.get("content") or "")) for m in body["messages"]), 1)


async def claude(body: Dict[str, Any], model: str, stream: bool, send, entry: Dict[str, Any]) -> None:
    """Answers, recording `entry` with its status before the answer leaves (so a test that
    has its answer finds the record)."""
    last = text_of(body["messages"][-1].get("content") or "")
    if "[429]" in last:
        status, payload = google_error(429, "RESOURCE_EXHAUSTED",
                                       "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model.")
        record({**entry, "status": status})
        return await send_json(send, status, payload)
    if "[529]" in last:
        status, payload = anthropic_error(529, "overloaded_error", "Overloaded")
        record({**entry, "status": status})
        return await send_json(send, status, payload)
    blocks, stop = claude_answer(body)
    output = sum(words(b.get("text", "")) for b in blocks) + sum(1 for b in blocks if b["type"] == "tool_use")
    usage = {"input_tokens": prompt_words(body), "output_tokens": output}
    message = {"id": "msg_vrtx_01", "type": "message", "role": "assistant", "model": model,
               "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
    atypes.Message.model_validate(message)
    record({**entry, "status": 200})
    if not stream:
        return await send_json(send, 200, message)
    events: List[Tuple[str, Dict[str, Any]]] = [("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}})]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in re.findall(r"\S+\s*", block["text"])]
        else:
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": output}}))
    events.append(("message_stop", {"type": "message_stop"}))
    for _, data in events:
        _stream_event.validate_python(data)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
    for name, data in events:
        chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def send_json(send, status: int, payload: Any) -> None:
    await gemini_asgi_app.send_json(send, status, payload)


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                startup(int(os.environ["VERTEX_PORT"]))
                record({"type": "startup"})
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    raw = await gemini_asgi_app.read_body(receive)
    path = scope["path"]
    if path == "/token" and scope["method"] == "POST":
        return await token(raw, send)
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    bearer = headers.get("authorization", "")
    presented = bearer[len("Bearer "):] if bearer.startswith("Bearer ") else None
    entry: Dict[str, Any] = {"type": "vertex", "path": path, "query": scope.get("query_string", b"").decode(),
                             "token": presented, "headers": headers}

    async def finish(status: int, payload: Any) -> None:
        entry["status"] = status
        record(entry)
        await send_json(send, status, payload)

    expires = _tokens.get(presented or "")
    if expires is None or time.monotonic() >= expires:
        entry["expired"] = expires is not None
        return await finish(*google_error(401, "UNAUTHENTICATED",
                                          "Request had invalid authentication credentials. Expected OAuth 2 access token."))
    match = re.fullmatch(r"/v1/projects/([^/]+)/locations/([^/]+)/publishers/(google|anthropic)/models/([^/:]+):(\w+)", path)
    if scope["method"] != "POST" or not match:
        return await finish(*google_error(404, "NOT_FOUND", f"Not found: {path}"))
    project, location, publisher, model, method = match.groups()
    if (project, location) != (os.environ.get("VERTEX_PROJECT"), os.environ.get("VERTEX_LOCATION")):
        return await finish(*google_error(404, "NOT_FOUND", f"Project {project} or location {location} not found"))
    if publisher == "google" and method in ("predict", "countTokens"):
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        entry["body"] = body
        problem = check_predict(body, model) if method == "predict" else check_count_tokens(body)
        if problem:
            entry["invalid"] = problem
            return await finish(*google_error(400, "INVALID_ARGUMENT", problem))
        if method == "predict":
            return await finish(200, predict_answer(body, model))
        answer = gemini_asgi_app.dump(gtypes.CountTokensResponse(total_tokens=count_words(body)))
        genai_models._CountTokensResponse_from_vertex(answer)
        return await finish(200, answer)
    if publisher == "google":
        entry["status"] = "delegated"
        record(entry)
        inner = dict(scope)
        inner["path"] = f"/v1beta/models/{model}:{method}"
        inner["raw_path"] = inner["path"].encode()
        inner["headers"] = [(k, v) for k, v in scope["headers"] if k.lower() != b"authorization"] + \
            [(b"x-goog-api-key", GEMINI_KEY.encode())]
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        return await gemini_asgi_app.app(inner, replay, send)
    if method not in ("rawPredict", "streamRawPredict"):
        return await finish(*google_error(404, "NOT_FOUND", f"Method {method} not found"))
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    entry["body"] = body
    if model == "count-tokens":
        problem = check_claude_count(body) if method == "rawPredict" else "count-tokens has no streamRawPredict"
        if problem:
            entry["invalid"] = problem
            return await finish(*anthropic_error(400, "invalid_request_error", problem))
        counted = atypes.MessageTokensCount(input_tokens=prompt_words(body))
        return await finish(200, counted.model_dump(mode="json"))
    stream = method == "streamRawPredict"
    problem = check_messages(body, stream)
    if problem:
        entry["invalid"] = problem
        return await finish(*anthropic_error(400, "invalid_request_error", problem))
    await claude(body, model, stream, send, entry)

"""A small Gemini API (Google AI Studio) as a plain ASGI app, built on Google's own SDK types.

uvicorn serves it as the gateway's `gemini` provider in `e2e/tests/gemini_gateway.rs`. Every
request body is validated against the `google-genai` SDK's pydantic types (which forbid unknown
fields, as the real API refuses unknown names), and every answer is built from those types and
dumped in the API's camelCase JSON, so what the gateway reads is what the SDK itself parses.

    POST /v1beta/models/{model}:generateContent                  one GenerateContentResponse
    POST /v1beta/models/{model}:streamGenerateContent?alt=sse    SSE, one response per event
    POST /v1beta/models/{model}:batchEmbedContents               {"embeddings": [...]}
    POST /v1beta/models/{model}:countTokens                      {"totalTokens": n}, words of
                                                                 a generateContentRequest

Authentication is `x-goog-api-key`: none is 403 PERMISSION_DENIED, a wrong one 400
INVALID_ARGUMENT ("API key not valid"), as the real API answers. Errors use Google's envelope
`{"error": {"code", "message", "status"}}`.

What the model "says" is decided by the request, deterministically:

    "[429]" in the last user text      429 RESOURCE_EXHAUSTED
    "[503]" in the last user text      503 UNAVAILABLE
    "[cut]"   (stream)                 one text event, then the body ends without a finish
    "[error]" (stream)                 one text event, then an in-band `error` object
    tools declared, no result yet      a functionCall of the first function, args {"city": "Paris"}
    a functionResponse in the turn     "The tool said: <response as JSON>"
    responseMimeType application/json  a JSON object ({"name": "Ada", "age": 36} for a schema)
    an inlineData part                 "I see <mimeType>."
    otherwise                          "Hello from Gemini."

with a thought part first when `thinkingConfig.includeThoughts` is set, and usage counted in
words (prompt, candidates, thoughts; `cachedContentTokenCount` 2 when the prompt has "[cached]").

Gemini 3 models (`gemini-3…`) sign their function calls as Google documents: the first
functionCall part of an answer carries an opaque `thoughtSignature` (standard base64), and a
request whose current turn (the contents after the last user text) gives a model step's first
functionCall back without the signature issued for it is refused with 400 INVALID_ARGUMENT
("Function call `<name>` in the `<n>.` content block is missing a `thought_signature`"), one
with a signature never issued with "Corrupted thought signature".

Settings come from the environment:

    GEMINI_API_KEY   the only key accepted
    GEMINI_RECORD    a file that gets one JSON line per event: `{"type": "startup"}` once the
                     app has started, and `{"type": "request", ...}` per request (method, path,
                     query, headers, parsed body, and `invalid` with the validation error if any)
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from google.genai import types

MODEL_VERSION = "gemini-2.5-flash-mock"
_record_file = None

ALLOWED_TOP = {
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
}


def record(event: Dict[str, Any]) -> None:
    global _record_file
    path = os.environ.get("GEMINI_RECORD")
    if not path:
        return
    if _record_file is None:
        _record_file = open(path, "a", encoding="utf-8")
    _record_file.write(json.dumps(event, sort_keys=True) + "\n")
    _record_file.flush()


def dump(model: Any) -> Dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def google_error(code: int, status: str, message: str) -> Tuple[int, Dict[str, Any]]:
    return code, {"error": {"code": code, "message": message, "status": status}}


def validate_generate(body: Any) -> Tuple[Optional[str], Optional[types.GenerationConfig], List[types.Content], List[types.Tool]]:
    """Checks a generateContent body field by field against the SDK's types."""
    if not isinstance(body, dict):
        return "the body is not a JSON object", None, [], []
    unknown = set(body) - ALLOWED_TOP
    if unknown:
        return f"Invalid JSON payload received. Unknown name {sorted(unknown)[0]!r}", None, [], []
    if not body.get("contents"):
        return "* GenerateContentRequest.contents: contents is not specified", None, [], []
    try:
        contents = [types.Content.model_validate(c) for c in body["contents"]]
        for content in contents:
            if content.role not in ("user", "model"):
                return f"Please use a valid role: user, model (got {content.role!r})", None, [], []
        if "systemInstruction" in body:
            types.Content.model_validate(body["systemInstruction"])
        tools = [types.Tool.model_validate(t) for t in body.get("tools", [])]
        if "toolConfig" in body:
            types.ToolConfig.model_validate(body["toolConfig"])
        config = types.GenerationConfig.model_validate(body.get("generationConfig", {}))
    except Exception as error:  # pydantic's ValidationError, reported as the API would
        return f"Invalid JSON payload received. {error}", None, [], []
    return None, config, contents, tools


SIGNED: set = set()


def sign(answer: Dict[str, Any]) -> Dict[str, Any]:
    """Puts a fresh signature on the answer's first functionCall part, if it has one."""
    for candidate in answer.get("candidates", []):
        for part in (candidate.get("content") or {}).get("parts", []):
            if "functionCall" in part:
                raw = os.urandom(24)
                SIGNED.add(raw)
                part["thoughtSignature"] = base64.b64encode(raw).decode()
                return answer
    return answer


def decoded(signature: str) -> Optional[bytes]:
    padded = signature + "=" * (-len(signature) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            return decode(padded)
        except (ValueError, TypeError):
            continue
    return None


def unsigned_call(contents: List[Dict[str, Any]]) -> Optional[str]:
    """Gemini 3's check of the current turn's function calls: the refusal, or None."""
    start = 0
    for i, content in enumerate(contents):
        if content.get("role") == "user" and any("text" in p for p in content.get("parts", [])):
            start = i
    for i in range(start, len(contents)):
        content = contents[i]
        calls = [p for p in content.get("parts", []) if "functionCall" in p]
        if content.get("role") != "model" or not calls:
            continue
        first = calls[0]
        if "thoughtSignature" not in first:
            name = first["functionCall"].get("name", "")
            return (f"Function call `{name}` in the `{i + 1}.` content block is missing a "
                    "`thought_signature`. Learn more: https://ai.google.dev/gemini-api/docs/thought-signatures")
        if decoded(first["thoughtSignature"]) not in SIGNED:
            return "Corrupted thought signature."
    return None


def texts(content: types.Content) -> str:
    return " ".join(p.text for p in content.parts or [] if p.text)


def words(text: str) -> int:
    return len(text.split())


def answer_parts(body: Dict[str, Any], config: types.GenerationConfig, contents: List[types.Content], tools: List[types.Tool]) -> Tuple[List[types.Part], types.FinishReason]:
    last = contents[-1]
    responses = [p.function_response for p in last.parts or [] if p.function_response]
    images = [p.inline_data for c in contents for p in c.parts or [] if p.inline_data]
    declarations = [d for t in tools for d in t.function_declarations or []]
    if declarations and not responses:
        call = types.FunctionCall(name=declarations[0].name, args={"city": "Paris"})
        return [types.Part(function_call=call)], types.FinishReason.STOP
    if responses:
        said = json.dumps(responses[0].response, sort_keys=True)
        text = f"The tool said: {said}"
    elif config.response_mime_type == "application/json":
        schema = config.response_json_schema or {}
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        text = json.dumps({"name": "Ada", "age": 36} if "name" in props else {"ok": True})
    elif images:
        text = f"I see {images[0].mime_type}."
    else:
        text = "Hello from Gemini."
    return [types.Part(text=t) for t in re.findall(r"\S+\s*", text)], types.FinishReason.STOP


def thoughts(config: types.GenerationConfig) -> List[types.Part]:
    thinking = config.thinking_config
    if thinking is not None and thinking.include_thoughts:
        return [types.Part(text="Thinking about it.", thought=True)]
    return []


def usage(prompt: str, parts: List[types.Part]) -> types.GenerateContentResponseUsageMetadata:
    answer = sum(words(p.text or "") for p in parts if not p.thought) + sum(
        1 for p in parts if p.function_call
    )
    thought = sum(words(p.text or "") for p in parts if p.thought)
    prompt_count = max(words(prompt), 1)
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=prompt_count,
        candidates_token_count=answer,
        thoughts_token_count=thought or None,
        cached_content_token_count=2 if "[cached]" in prompt else None,
        total_token_count=prompt_count + answer + thought,
    )


def response(parts: List[types.Part], finish: Optional[types.FinishReason], meta: Optional[types.GenerateContentResponseUsageMetadata]) -> Dict[str, Any]:
    candidate = types.Candidate(
        content=types.Content(role="model", parts=parts),
        finish_reason=finish,
        index=0,
    )
    built = types.GenerateContentResponse(
        candidates=[candidate],
        usage_metadata=meta,
        model_version=MODEL_VERSION,
        response_id="mock-response-1",
    )
    out = dump(built)
    # What the gateway gets must parse with the SDK, the way the SDK parses the API's answers.
    types.GenerateContentResponse.model_validate(out)
    return out


async def read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def send_json(send, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json; charset=UTF-8"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def send_events(send, events: List[Dict[str, Any]]) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"),
                            (b"cache-control", b"no-cache")]})
    for event in events:
        data = b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\r\n\r\n"
        await send({"type": "http.response.body", "body": data, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                record({"type": "startup"})
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    raw = await read_body(receive)
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    path = scope["path"]
    query = scope.get("query_string", b"").decode()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    entry = {"type": "request", "method": scope["method"], "path": path, "query": query,
             "headers": headers, "body": body}

    def finish(status: int, payload: Any):
        entry["status"] = status
        record(entry)
        return send_json(send, status, payload)

    key = headers.get("x-goog-api-key")
    if key is None:
        return await finish(*google_error(403, "PERMISSION_DENIED",
                                          "Method doesn't allow unregistered callers."))
    if key != os.environ.get("GEMINI_API_KEY"):
        return await finish(*google_error(400, "INVALID_ARGUMENT",
                                          "API key not valid. Please pass a valid API key."))
    match = re.fullmatch(r"/v1beta/models/([^/:]+):(\w+)", path)
    if scope["method"] != "POST" or not match:
        return await finish(*google_error(404, "NOT_FOUND", f"Not found: {path}"))
    model, method = match.groups()

    if method == "batchEmbedContents":
        try:
            requests = body["requests"]
            vectors = []
            for i, request in enumerate(requests):
                if request.get("model") != f"models/{model}":
                    raise ValueError(f"requests[{i}].model must be models/{model}")
                unknown = set(request) - {"model", "content", "taskType", "title", "outputDimensionality"}
                if unknown:
                    raise ValueError(f"Unknown name {sorted(unknown)[0]!r}")
                content = types.Content.model_validate(request["content"])
                size = request.get("outputDimensionality") or 4
                seed = words(texts(content))
                vectors.append(types.ContentEmbedding(values=[float(seed + j) / 8 for j in range(size)]))
        except Exception as error:
            entry["invalid"] = str(error)
            return await finish(*google_error(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {error}"))
        # The SDK reads batchEmbedContents' answer as an EmbedContentResponse.
        answer = dump(types.EmbedContentResponse(embeddings=vectors))
        types.EmbedContentResponse.model_validate(answer)
        return await finish(200, answer)

    if method == "countTokens":
        inner = dict(body.get("generateContentRequest") or {}) if isinstance(body, dict) else {}
        problem = None
        if set(body or {}) - {"generateContentRequest", "contents"}:
            problem = "Unknown name in countTokens body"
        elif inner.pop("model", None) != f"models/{model}":
            problem = f"generateContentRequest.model must be models/{model}"
        else:
            problem, _, contents, _ = validate_generate(inner)
        if problem:
            entry["invalid"] = problem
            return await finish(*google_error(400, "INVALID_ARGUMENT", problem))
        prompt = " ".join(texts(c) for c in contents)
        if "systemInstruction" in inner:
            prompt += " " + texts(types.Content.model_validate(inner["systemInstruction"]))
        answer = dump(types.CountTokensResponse(total_tokens=words(prompt)))
        types.CountTokensResponse.model_validate(answer)
        return await finish(200, answer)

    if method not in ("generateContent", "streamGenerateContent"):
        return await finish(*google_error(404, "NOT_FOUND", f"Method {method} not found"))
    stream = method == "streamGenerateContent"
    if stream and "alt=sse" not in query.split("&"):
        return await finish(*google_error(400, "INVALID_ARGUMENT", "this mock streams only with alt=sse"))
    invalid, config, contents, tools = validate_generate(body)
    if invalid:
        entry["invalid"] = invalid
        return await finish(*google_error(400, "INVALID_ARGUMENT", invalid))
    signing = model.startswith("gemini-3")
    if signing:
        refusal = unsigned_call(body["contents"])
        if refusal:
            entry["invalid"] = refusal
            return await finish(*google_error(400, "INVALID_ARGUMENT", refusal))
    last_text = texts(contents[-1])
    if "[429]" in last_text:
        return await finish(*google_error(429, "RESOURCE_EXHAUSTED",
                                          "Resource has been exhausted (e.g. check quota)."))
    if "[503]" in last_text:
        return await finish(*google_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."))
    prompt = " ".join(texts(c) for c in contents)
    if "systemInstruction" in body:
        prompt += " " + texts(types.Content.model_validate(body["systemInstruction"]))
    parts, reason = answer_parts(body, config, contents, tools)
    thought = thoughts(config)
    meta = usage(prompt, thought + parts)
    if not stream:
        entry["status"] = 200
        record(entry)
        answer = response(thought + parts, reason, meta)
        return await send_json(send, 200, sign(answer) if signing else answer)
    entry["status"] = 200
    record(entry)
    pieces = thought + parts
    if "[cut]" in last_text:
        return await send_events(send, [response(pieces[:1], None, None)])
    if "[error]" in last_text:
        return await send_events(send, [response(pieces[:1], None, None),
                                        google_error(503, "UNAVAILABLE", "The model is overloaded.")[1]])
    events = [response([p], None, None) for p in pieces[:-1]]
    events.append(response(pieces[-1:], reason, meta))
    if signing:
        for event in events:
            if any("functionCall" in p for c in event.get("candidates", [])
                   for p in (c.get("content") or {}).get("parts", [])):
                sign(event)
                break
    await send_events(send, events)

"""A small Amazon Bedrock runtime as a plain ASGI app, checked by AWS's own botocore.

uvicorn serves it as the gateway's `bedrock` provider in `e2e/tests/bedrock_gateway.rs`.

- Every request's SigV4 signature is recomputed with botocore's `SigV4Auth` (the same
  credentials, region and service `bedrock`, at the request's own `X-Amz-Date`, over the headers
  the request says it signed and the raw path and body as they arrived): a mismatch is 403
  `InvalidSignatureException`, an unknown access key 403 `UnrecognizedClientException`, a date
  more than 15 minutes off 403 `InvalidSignatureException` ("Signature expired"), as AWS answers.
- Every Converse and InvokeModel body is checked against botocore's own bedrock-runtime service
  model (unknown members, missing required ones, union members, types): a refused body is 400
  `ValidationException` and is recorded with `invalid`.
- Every ConverseStream message is encoded here and decoded again with botocore's
  `EventStreamBuffer` before it is sent, so what the gateway reads is what botocore accepts.

    POST /model/{id}/converse           one Converse answer
    POST /model/{id}/converse-stream    application/vnd.amazon.eventstream
    POST /model/{id}/invoke             Titan (`inputText`) or Cohere (`texts`) embeddings

Errors are AWS's: status, `x-amzn-ErrorType: <Name>:http://internal.amazon.com/coral/...`,
and `{"message": ...}`.

What the model "says" is decided by the request, deterministically:

    "[429]" in the last user text      429 ThrottlingException
    "[503]" in the last user text      503 ServiceUnavailableException
    "[long]" in the last user text     400 ValidationException "Input is too long for requested model."
    "[cut]"       (stream)             one text delta, then the body ends
    "[exception]" (stream)             one text delta, then a throttlingException message
    "[badcrc]"    (stream)             one text delta, then a message whose CRC is wrong
    toolChoice names a tool            a toolUse of it ({"name": "Ada", "age": 36} for json_output)
    tools, no toolResult in the turn   a toolUse of the first tool, input {"city": "Paris"}
    a toolResult in the last turn      "The tool said: <its content as JSON>"
    an image block                     "I see image/<format>."
    otherwise                          "Hello from Bedrock."

with a reasoning block first when `additionalModelRequestFields.thinking` is enabled, and usage
counted in words. Prompt caching is Bedrock's: only a request with `cachePoint` blocks caches;
the prefix up to its last `cachePoint` (tools, then system, then messages) is written on first
sight (`cacheWriteInputTokens`) and read after (`cacheReadInputTokens`), and `inputTokens`
counts only the rest.

Settings come from the environment: BEDROCK_ACCESS_KEY_ID, BEDROCK_SECRET_ACCESS_KEY,
BEDROCK_SESSION_TOKEN (optional), BEDROCK_REGION, and BEDROCK_RECORD (a file that gets one JSON
line per event: `{"type": "startup"}`, then `{"type": "request", ...}` per request).

With BEDROCK_WEB_IDENTITY_TOKEN set it is also STS for web identities: an unsigned `POST /` of
`Action=AssumeRoleWithWebIdentity` (its parameters checked against botocore's STS service model)
carrying that token answers STS's XML with the credentials above, expiring after
BEDROCK_STS_LIFETIME seconds (default 3600), and records `{"type": "sts", ...}`; another token
is STS's 400 `InvalidIdentityToken`.
"""

from __future__ import annotations

import binascii
import datetime
import json
import os
import re
import struct
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

_record_file = None
_model = botocore.session.get_session().get_service_model("bedrock-runtime")
_sts = botocore.session.get_session().get_service_model("sts")

AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})$"
)
EVENT_STREAM = "application/vnd.amazon.eventstream"


def record(event: Dict[str, Any]) -> None:
    global _record_file
    path = os.environ.get("BEDROCK_RECORD")
    if not path:
        return
    if _record_file is None:
        _record_file = open(path, "a", encoding="utf-8")
    _record_file.write(json.dumps(event, sort_keys=True) + "\n")
    _record_file.flush()


class AwsError(Exception):
    def __init__(self, status: int, name: str, message: str):
        super().__init__(message)
        self.status, self.name, self.message = status, name, message


def verify_signature(method: str, host: str, raw_path: str, query: str, headers: Dict[str, str], body: bytes) -> None:
    """Recomputes the request's SigV4 signature with botocore, as AWS checks it."""
    auth = AUTH.match(headers.get("authorization", ""))
    if not auth:
        raise AwsError(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
    if auth["key"] != os.environ["BEDROCK_ACCESS_KEY_ID"]:
        raise AwsError(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
    stamp = headers.get("x-amz-date", "")
    try:
        when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        raise AwsError(403, "IncompleteSignatureException", "X-Amz-Date is missing or malformed.")
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 15 * 60:
        raise AwsError(403, "InvalidSignatureException", "Signature expired: " + stamp)
    token = os.environ.get("BEDROCK_SESSION_TOKEN")
    if token and headers.get("x-amz-security-token") != token:
        raise AwsError(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
    signed = auth["signed"].split(";")
    url = f"http://{host}{raw_path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, data=body,
                         headers={name: headers.get(name, "") for name in signed if name != "host"})
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(os.environ["BEDROCK_ACCESS_KEY_ID"], os.environ["BEDROCK_SECRET_ACCESS_KEY"], token),
                       "bedrock", os.environ["BEDROCK_REGION"])
    if "host" not in signed or "x-amz-date" not in signed:
        raise AwsError(403, "InvalidSignatureException", "host and x-amz-date must be signed")
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if expected != auth["signature"]:
        raise AwsError(403, "InvalidSignatureException",
                       "The request signature we calculated does not match the signature you provided. "
                       "Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")


def check(shape, value: Any, path: str) -> None:
    """`value` (JSON as the REST-JSON protocol carries it) against a botocore shape."""
    kind = shape.type_name
    if kind == "structure" and shape.is_document_type:
        # A document (`inputSchema.json`, `additionalModelRequestFields`): any JSON.
        return
    if kind == "structure":
        if not isinstance(value, dict):
            raise ValueError(f"{path}: expected an object")
        members = shape.members
        for name in value:
            if name not in members:
                raise ValueError(f"{path}: unknown member {name!r}")
        for name in shape.required_members:
            if name not in value:
                raise ValueError(f"{path}: missing required member {name!r}")
        if getattr(shape, "is_tagged_union", False) and len(value) != 1:
            raise ValueError(f"{path}: a union takes exactly one member, got {sorted(value)}")
        for name, item in value.items():
            check(members[name], item, f"{path}.{name}")
    elif kind == "list":
        if not isinstance(value, list):
            raise ValueError(f"{path}: expected a list")
        for i, item in enumerate(value):
            check(shape.member, item, f"{path}[{i}]")
    elif kind == "map":
        if not isinstance(value, dict):
            raise ValueError(f"{path}: expected a map")
    elif kind == "string":
        if not isinstance(value, str):
            raise ValueError(f"{path}: expected a string")
        if shape.enum and value not in shape.enum:
            raise ValueError(f"{path}: {value!r} is not one of {shape.enum}")
    elif kind == "blob":
        if not isinstance(value, str):
            raise ValueError(f"{path}: expected base64 bytes")
        binascii.a2b_base64(value)
    elif kind in ("integer", "long"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{path}: expected an integer")
    elif kind in ("float", "double"):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"{path}: expected a number")
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"{path}: expected a boolean")


def check_converse(operation: str, body: Any) -> None:
    shape = _model.operation_model(operation).input_shape
    # The model id travels in the path (a `location: uri` member), never in the body.
    members = {n: m for n, m in shape.members.items() if m.serialization.get("location") is None}
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    for name in body:
        if name not in members:
            raise ValueError(f"unknown member {name!r}")
    if "messages" not in body:
        raise ValueError("missing required member 'messages'")
    for name, value in body.items():
        check(members[name], value, name)


def words(text: str) -> int:
    return len(text.split())


def text_of(content: List[Dict[str, Any]]) -> str:
    return " ".join(b["text"] for b in content if "text" in b)


def answer(body: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], str]:
    messages = body["messages"]
    last = messages[-1]["content"]
    tools = (body.get("toolConfig") or {}).get("tools") or []
    choice = (body.get("toolConfig") or {}).get("toolChoice") or {}
    results = [b["toolResult"] for b in last if "toolResult" in b]
    images = [b["image"] for b in last if "image" in b]
    if "tool" in choice:
        name = choice["tool"]["name"]
        value = {"name": "Ada", "age": 36} if name == "json_output" else {"city": "Paris"}
        return [{"toolUse": {"toolUseId": "tooluse_bedrock_1", "name": name, "input": value}}], "tool_use"
    if results:
        said = json.dumps(results[0]["content"][0].get("json", results[0]["content"][0].get("text")))
        return [{"text": "The tool said: " + said}], "end_turn"
    if tools:
        name = tools[0]["toolSpec"]["name"]
        return [{"toolUse": {"toolUseId": "tooluse_bedrock_1", "name": name, "input": {"city": "Paris"}}}], "tool_use"
    if images:
        return [{"text": f"I see image/{images[0]['format']}."}], "end_turn"
    return [{"text": "Hello from Bedrock."}], "end_turn"


def thinking(body: Dict[str, Any]) -> List[Dict[str, Any]]:
    fields = body.get("additionalModelRequestFields") or {}
    if (fields.get("thinking") or {}).get("type") == "enabled":
        return [{"reasoningContent": {"reasoningText": {"text": "Thinking about it.", "signature": "sig-1"}}}]
    return []


def usage(body: Dict[str, Any], content: List[Dict[str, Any]]) -> Dict[str, Any]:
    prompt = " ".join(text_of(m["content"]) for m in body["messages"])
    prompt += " " + " ".join(s.get("text", "") for s in body.get("system") or [])
    out = 0
    for block in content:
        if "text" in block:
            out += words(block["text"])
        elif "reasoningContent" in block:
            out += words(block["reasoningContent"]["reasoningText"]["text"])
        else:
            out += 2
    prompt_tokens = words(prompt)
    result = {"inputTokens": prompt_tokens, "outputTokens": out, "totalTokens": prompt_tokens + out}
    prefix = cache_prefix(body)
    if prefix is not None:
        cached = words(prefix)
        result["inputTokens"] = max(prompt_tokens - cached, 0)
        result["cacheReadInputTokens"] = cached if prefix in CACHE else 0
        result["cacheWriteInputTokens"] = 0 if prefix in CACHE else cached
        CACHE.add(prefix)
    return result


CACHE: set = set()


def cache_prefix(body: Dict[str, Any]) -> Optional[str]:
    """The text before the request's last `cachePoint`, in Bedrock's order (tools, system,
    messages); None without one."""
    parts: List[str] = []
    last = None
    blocks = [(t, "") for t in (body.get("toolConfig") or {}).get("tools", [])]
    blocks += [(b, b.get("text", "")) for b in body.get("system") or []]
    blocks += [(b, b.get("text", "")) for m in body["messages"] for b in m["content"]]
    for block, text in blocks:
        if "cachePoint" in block:
            last = len(parts)
        else:
            parts.append(text)
    return None if last is None else " ".join(parts[:last])


def frame(headers: List[Tuple[str, str]], payload: bytes) -> bytes:
    """One event-stream message: prelude, string headers, payload, CRC32s."""
    encoded = b""
    for name, value in headers:
        raw = value.encode()
        encoded += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message) & 0xFFFFFFFF)


def event(kind: str, payload: Dict[str, Any]) -> bytes:
    data = frame([(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
                 json.dumps(payload, separators=(",", ":")).encode())
    checked(data, kind)
    return data


def checked(data: bytes, kind: str) -> None:
    """Decodes `data` with botocore's event-stream decoder: it must read back as one message."""
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    decoded = list(buffer)
    assert len(decoded) == 1, f"{kind}: botocore read {len(decoded)} messages"
    headers = decoded[0].headers
    assert headers.get(":event-type", headers.get(":exception-type")) == kind, headers


def stream_events(body: Dict[str, Any], content: List[Dict[str, Any]], reason: str, meta: Dict[str, Any]) -> List[bytes]:
    out = [event("messageStart", {"role": "assistant"})]
    for index, block in enumerate(content):
        if "toolUse" in block:
            use = block["toolUse"]
            out.append(event("contentBlockStart", {"contentBlockIndex": index,
                             "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}}))
            text = json.dumps(use["input"])
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                out.append(event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}))
        elif "reasoningContent" in block:
            reasoning = block["reasoningContent"]["reasoningText"]
            out.append(event("contentBlockDelta", {"contentBlockIndex": index,
                             "delta": {"reasoningContent": {"text": reasoning["text"]}}}))
            out.append(event("contentBlockDelta", {"contentBlockIndex": index,
                             "delta": {"reasoningContent": {"signature": reasoning["signature"]}}}))
        else:
            for piece in re.findall(r"\S+\s*", block["text"]):
                out.append(event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}))
        out.append(event("contentBlockStop", {"contentBlockIndex": index}))
    out.append(event("messageStop", {"stopReason": reason}))
    out.append(event("metadata", {"usage": meta, "metrics": {"latencyMs": 42}}))
    return out


async def read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def send_json(send, status: int, payload: Any, error: Optional[str] = None) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
               (b"x-amzn-requestid", b"0b6a3f4c-mock")]
    if error:
        headers.append((b"x-amzn-errortype", f"{error}:http://internal.amazon.com/coral/com.amazon.bedrock/".encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def send_frames(send, frames: List[bytes]) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", EVENT_STREAM.encode()), (b"x-amzn-requestid", b"0b6a3f4c-mock")]})
    for data in frames:
        await send({"type": "http.response.body", "body": data, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def sts_xml(status: int, body: str) -> Tuple[int, bytes]:
    return status, body.encode()


def assume_role_with_web_identity(form: Dict[str, List[str]]) -> Tuple[int, bytes]:
    """STS's AssumeRoleWithWebIdentity, as its API reference documents the answer."""
    ns = "https://sts.amazonaws.com/doc/2011-06-15/"

    def error(status: int, code: str, message: str) -> Tuple[int, bytes]:
        return sts_xml(status, f'<ErrorResponse xmlns="{ns}"><Error><Type>Sender</Type><Code>{code}</Code>'
                               f"<Message>{message}</Message></Error><RequestId>sts-1</RequestId></ErrorResponse>")

    params = {k: v[0] for k, v in form.items()}
    if params.get("Version") != "2011-06-15":
        return error(400, "InvalidAction", "Could not find operation AssumeRoleWithWebIdentity for version "
                     + params.get("Version", "NO_VERSION_SPECIFIED"))
    shape = _sts.operation_model("AssumeRoleWithWebIdentity").input_shape
    for name in shape.required_members:
        if not params.get(name):
            return error(400, "MissingParameter", f"The request must contain the parameter {name}")
    for name, value in params.items():
        if name in ("Action", "Version"):
            continue
        member = shape.members.get(name)
        if member is None:
            return error(400, "InvalidParameterValue", f"Unknown parameter {name}")
        low, high = member.metadata.get("min", 0), member.metadata.get("max", 1 << 20)
        if not low <= len(value) <= high or ("pattern" in member.metadata and name == "RoleSessionName"
                                             and not re.fullmatch(r"[\w+=,.@-]*", value)):
            return error(400, "ValidationError", f"Value at '{name}' failed to satisfy constraint")
    if params["WebIdentityToken"] != os.environ["BEDROCK_WEB_IDENTITY_TOKEN"]:
        return error(400, "InvalidIdentityToken", "Couldn't retrieve verification key from your identity provider")
    lifetime = int(os.environ.get("BEDROCK_STS_LIFETIME", "3600"))
    expiration = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lifetime))
    return sts_xml(200, f"""<AssumeRoleWithWebIdentityResponse xmlns="{ns}">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:default:aisix</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>{params["RoleArn"].replace(":role/", ":assumed-role/").replace("arn:aws:iam", "arn:aws:sts")}/{params["RoleSessionName"]}</Arn>
      <AssumedRoleId>AROAMOCK:{params["RoleSessionName"]}</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>{os.environ["BEDROCK_SESSION_TOKEN"]}</SessionToken>
      <SecretAccessKey>{os.environ["BEDROCK_SECRET_ACCESS_KEY"]}</SecretAccessKey>
      <Expiration>{expiration.strftime("%Y-%m-%dT%H:%M:%SZ")}</Expiration>
      <AccessKeyId>{os.environ["BEDROCK_ACCESS_KEY_ID"]}</AccessKeyId>
    </Credentials>
    <Provider>oidc.eks.us-west-2.amazonaws.com</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>sts-1</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>""")


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
    raw_path = scope.get("raw_path", scope["path"].encode()).decode()
    query = scope.get("query_string", b"").decode()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    entry = {"type": "request", "method": scope["method"], "path": scope["path"], "raw_path": raw_path,
             "headers": headers, "body": body}

    async def fail(error: AwsError) -> None:
        entry["status"] = error.status
        entry["error"] = error.name
        record(entry)
        await send_json(send, error.status, {"message": error.message}, error.name)

    if scope["path"] == "/" and os.environ.get("BEDROCK_WEB_IDENTITY_TOKEN"):
        form = urllib.parse.parse_qs(raw.decode(), keep_blank_values=True)
        if scope["method"] == "POST" and form.get("Action") == ["AssumeRoleWithWebIdentity"]:
            status, xml = assume_role_with_web_identity(form)
            record({"type": "sts", "status": status, "params": {k: v[0] for k, v in form.items()},
                    "content_type": headers.get("content-type"), "signed": "authorization" in headers})
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"text/xml")]})
            return await send({"type": "http.response.body", "body": xml})

    try:
        verify_signature(scope["method"], headers.get("host", ""), raw_path, query, headers, raw)
    except AwsError as error:
        return await fail(error)
    match = re.fullmatch(r"/model/([^/]+)/(converse|converse-stream|invoke)", scope["path"])
    if scope["method"] != "POST" or not match:
        return await fail(AwsError(404, "UnknownOperationException", f"Unknown operation {scope['path']}"))
    model, action = match.groups()

    if action == "invoke":
        try:
            if "titan-embed" in model:
                if set(body) - {"inputText", "dimensions", "normalize", "embeddingTypes"} or "inputText" not in body:
                    raise ValueError("Malformed input request: Titan takes inputText")
                size = body.get("dimensions") or 4
                seed = words(body["inputText"])
                answer_body = {"embedding": [float(seed + j) / 8 for j in range(size)],
                               "inputTextTokenCount": seed}
            elif "cohere.embed" in model:
                if set(body) - {"texts", "input_type", "truncate", "embedding_types", "images"} or "input_type" not in body:
                    raise ValueError("Malformed input request: Cohere takes texts and input_type")
                answer_body = {"id": "emb-1", "response_type": "embeddings_floats", "texts": body["texts"],
                               "embeddings": [[float(words(t) + j) / 8 for j in range(4)] for t in body["texts"]]}
            else:
                raise ValueError(f"The provided model identifier is invalid: {model}")
        except Exception as error:
            entry["invalid"] = str(error)
            return await fail(AwsError(400, "ValidationException", str(error)))
        entry["status"] = 200
        record(entry)
        return await send_json(send, 200, answer_body)

    stream = action == "converse-stream"
    try:
        check_converse("ConverseStream" if stream else "Converse", body)
    except Exception as error:
        entry["invalid"] = str(error)
        return await fail(AwsError(400, "ValidationException", str(error)))
    last_text = text_of(body["messages"][-1]["content"])
    if "[429]" in last_text:
        return await fail(AwsError(429, "ThrottlingException", "Too many requests, please wait before trying again."))
    if "[503]" in last_text:
        return await fail(AwsError(503, "ServiceUnavailableException", "Bedrock is unable to process your request."))
    if "[long]" in last_text:
        return await fail(AwsError(400, "ValidationException", "Input is too long for requested model."))
    content, reason = answer(body)
    content = thinking(body) + content
    meta = usage(body, content)
    entry["status"] = 200
    record(entry)
    if not stream:
        return await send_json(send, 200, {"output": {"message": {"role": "assistant", "content": content}},
                                           "stopReason": reason, "usage": meta, "metrics": {"latencyMs": 42}})
    frames = stream_events(body, content, reason, meta)
    if "[cut]" in last_text:
        return await send_frames(send, frames[:2])
    if "[exception]" in last_text:
        exception = frame([(":exception-type", "throttlingException"), (":content-type", "application/json"),
                           (":message-type", "exception")],
                          json.dumps({"message": "Too many tokens, please wait before trying again."}).encode())
        checked(exception, "throttlingException")
        return await send_frames(send, frames[:2] + [exception])
    if "[badcrc]" in last_text:
        bad = bytearray(frames[2])
        bad[-6] ^= 1
        try:
            checked(bytes(bad), "contentBlockDelta")
            raise AssertionError("botocore read a message whose CRC is wrong")
        except AssertionError:
            raise
        except Exception:
            pass
        return await send_frames(send, frames[:2] + [bytes(bad)] + frames[3:])
    await send_frames(send, frames)

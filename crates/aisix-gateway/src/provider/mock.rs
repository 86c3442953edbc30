//! The built-in `mock` provider: answers chat completions, legacy completions and embeddings
//! locally in OpenAI's shapes, streaming or not, with plausible usage (and the Responses API
//! through its chat answer, translated as for any chat-only target). Deterministic: the same
//! request gets the same content, so demos and tests need no network.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::{Value, json};

use std::time::Duration;

use http::{HeaderValue, StatusCode};

use super::{Answer, Call};
use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, GatewayError};
use crate::limit::memory_budget::Held;
use crate::wire::usage::Usage;

/// The assistant's reply to every chat and completion request.
pub(crate) const REPLY: &str = "Hello! This is aisix's mock provider answering offline.";
/// Length of each embedding vector.
pub(crate) const EMBEDDING_DIMENSIONS: usize = 16;

/// A complete mock answer.
#[derive(Debug)]
pub(crate) struct MockReply {
    pub content_type: &'static str,
    pub body: Bytes,
    pub usage: Usage,
}

#[derive(Deserialize)]
struct MockRequest {
    #[serde(default)]
    messages: Option<Value>,
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    encoding_format: Option<String>,
}

/// The adapter: answers at once, streams included (as one SSE body).
pub(crate) fn call(call: &Call<'_>) -> Result<Answer, GatewayError> {
    let inbound = call.inbound;
    let model = if call.rename {
        call.shown_name()
    } else {
        &call.route.upstream_model
    };
    let reply = respond(
        inbound.endpoint,
        model,
        &inbound.body,
        inbound.stream,
        inbound.client_wants_usage(),
        call.request_id.to_str().unwrap_or_default(),
    )?;
    Ok(Answer::Complete {
        status: StatusCode::OK,
        content_type: HeaderValue::from_static(reply.content_type),
        // The in-process mock answers as the upstream model itself.
        model: call.context.map(|_| call.route.upstream_model.clone()),
        body: reply.body,
        usage: Some(reply.usage),
        held: Held::default(),
        waited: Duration::ZERO,
    })
}

/// Answers `body` (already validated by the inspector) for `model`.
pub(crate) fn respond(
    endpoint: Endpoint,
    model: &str,
    body: &[u8],
    stream: bool,
    include_usage: bool,
    request_id: &str,
) -> Result<MockReply, GatewayError> {
    let request: MockRequest = serde_json::from_slice(body).map_err(|e| {
        GatewayError::new(ErrorKind::InvalidRequest, format!("invalid request: {e}"))
    })?;
    match endpoint {
        Endpoint::ChatCompletions => {
            let prompt = request.messages.as_ref().ok_or_else(|| {
                GatewayError::new(ErrorKind::InvalidRequest, "'messages' is required.")
                    .with_param("messages")
            })?;
            let usage = usage_for(prompt);
            let id = format!("chatcmpl-{request_id}");
            Ok(if stream {
                sse(chat_chunks(&id, model, usage, include_usage), usage)
            } else {
                json_reply(
                    json!({
                        "id": id,
                        "object": "chat.completion",
                        "created": now(),
                        "model": model,
                        "choices": [{
                            "index": 0,
                            "message": {"role": "assistant", "content": REPLY, "refusal": null},
                            "logprobs": null,
                            "finish_reason": "stop"
                        }],
                        "usage": usage_json(usage),
                        "system_fingerprint": "aisix-mock"
                    }),
                    usage,
                )
            })
        }
        Endpoint::Completions => {
            let prompt = request.prompt.as_ref().ok_or_else(|| {
                GatewayError::new(ErrorKind::InvalidRequest, "'prompt' is required.")
                    .with_param("prompt")
            })?;
            let usage = usage_for(prompt);
            let id = format!("cmpl-{request_id}");
            Ok(if stream {
                sse(completion_chunks(&id, model, usage, include_usage), usage)
            } else {
                json_reply(
                    json!({
                        "id": id,
                        "object": "text_completion",
                        "created": now(),
                        "model": model,
                        "choices": [{"index": 0, "text": REPLY, "logprobs": null, "finish_reason": "stop"}],
                        "usage": usage_json(usage)
                    }),
                    usage,
                )
            })
        }
        Endpoint::Embeddings => {
            let inputs = embedding_inputs(request.input.as_ref())?;
            let base64 = request.encoding_format.as_deref() == Some("base64");
            let prompt_tokens: u64 = inputs.iter().map(|i| tokens(i)).sum();
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(index, text)| {
                    let vector = embed(text);
                    let embedding = if base64 {
                        let mut raw = Vec::with_capacity(vector.len() * 4);
                        for x in &vector {
                            raw.extend_from_slice(&x.to_le_bytes());
                        }
                        Value::String(base64::engine::general_purpose::STANDARD.encode(raw))
                    } else {
                        json!(vector)
                    };
                    json!({"object": "embedding", "index": index, "embedding": embedding})
                })
                .collect();
            let usage = Usage {
                prompt_tokens,
                completion_tokens: 0,
                total_tokens: prompt_tokens,
            };
            Ok(json_reply(
                json!({
                    "object": "list",
                    "data": data,
                    "model": model,
                    "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
                }),
                usage,
            ))
        }
        _ => Err(GatewayError::new(
            ErrorKind::NotFound,
            "The mock provider does not serve this endpoint.",
        )),
    }
}

fn embedding_inputs(input: Option<&Value>) -> Result<Vec<String>, GatewayError> {
    let invalid = || {
        GatewayError::new(
            ErrorKind::InvalidRequest,
            "'input' must be a string or an array of strings.",
        )
        .with_param("input")
    };
    match input {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                // Token arrays are accepted and embedded by their JSON text.
                other @ Value::Array(_) | other @ Value::Number(_) => Ok(other.to_string()),
                _ => Err(invalid()),
            })
            .collect(),
        _ => Err(invalid()),
    }
}

/// A unit-length vector derived from the text (FNV-1a seeded per dimension).
fn embed(text: &str) -> Vec<f32> {
    let mut vector: Vec<f32> = (0..EMBEDDING_DIMENSIONS as u64)
        .map(|d| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ d.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for b in text.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    let norm = vector
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    for x in &mut vector {
        *x /= norm;
    }
    vector
}

/// About four characters a token, as OpenAI's tokenizers average on English.
fn tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4).max(1)
}

fn usage_for(prompt: &Value) -> Usage {
    let prompt_tokens = tokens(&prompt.to_string());
    let completion_tokens = tokens(REPLY);
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn json_reply(value: Value, usage: Usage) -> MockReply {
    MockReply {
        content_type: "application/json",
        body: Bytes::from(value.to_string()),
        usage,
    }
}

/// The reply split into word-sized pieces, as a model streams tokens.
fn pieces() -> impl Iterator<Item = &'static str> {
    REPLY.split_inclusive(' ')
}

fn chat_chunks(id: &str, model: &str, usage: Usage, include_usage: bool) -> Vec<Value> {
    let created = now();
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut c = json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": "aisix-mock",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    };
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    chunks.extend(pieces().map(|p| chunk(json!({"content": p}), None)));
    chunks.push(chunk(json!({}), Some("stop")));
    if include_usage {
        chunks.push(json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": "aisix-mock", "choices": [], "usage": usage_json(usage)
        }));
    }
    chunks
}

fn completion_chunks(id: &str, model: &str, usage: Usage, include_usage: bool) -> Vec<Value> {
    let created = now();
    let chunk = |text: &str, finish: Option<&str>| {
        json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]
        })
    };
    let mut chunks: Vec<Value> = pieces().map(|p| chunk(p, None)).collect();
    chunks.push(chunk("", Some("stop")));
    if include_usage {
        chunks.push(json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": [], "usage": usage_json(usage)
        }));
    }
    chunks
}

fn sse(chunks: Vec<Value>, usage: Usage) -> MockReply {
    let mut out = BytesMut::new();
    for chunk in chunks {
        out.put_slice(b"data: ");
        out.put_slice(chunk.to_string().as_bytes());
        out.put_slice(b"\n\n");
    }
    out.put_slice(b"data: [DONE]\n\n");
    MockReply {
        content_type: "text/event-stream",
        body: out.freeze(),
        usage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_reply_has_the_openai_shape_and_usage() {
        let reply = respond(
            Endpoint::ChatCompletions,
            "demo",
            br#"{"model":"demo","messages":[{"role":"user","content":"hi"}]}"#,
            false,
            false,
            "r1",
        )
        .unwrap();
        let value: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(value["object"], "chat.completion");
        assert_eq!(value["choices"][0]["message"]["content"], REPLY);
        assert_eq!(value["usage"]["total_tokens"], reply.usage.total_tokens);
        assert!(reply.usage.prompt_tokens > 0 && reply.usage.completion_tokens > 0);
    }

    #[test]
    fn streamed_chat_ends_with_usage_then_done_when_asked() {
        let reply = respond(
            Endpoint::ChatCompletions,
            "demo",
            br#"{"model":"demo","messages":[]}"#,
            true,
            true,
            "r2",
        )
        .unwrap();
        let text = String::from_utf8(reply.body.to_vec()).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(*events.last().unwrap(), "data: [DONE]");
        let usage: Value =
            serde_json::from_str(events[events.len() - 2].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(
            usage["usage"]["completion_tokens"],
            reply.usage.completion_tokens
        );
        let content: String = events[..events.len() - 2]
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e.strip_prefix("data: ").unwrap()).ok())
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(content, REPLY);
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors_in_float_or_base64() {
        let body = br#"{"model":"e","input":["a","b"]}"#;
        let one = respond(Endpoint::Embeddings, "e", body, false, false, "r").unwrap();
        let two = respond(Endpoint::Embeddings, "e", body, false, false, "r").unwrap();
        assert_eq!(one.body, two.body);
        let value: Value = serde_json::from_slice(&one.body).unwrap();
        assert_eq!(value["data"].as_array().unwrap().len(), 2);
        let v: Vec<f64> = serde_json::from_value(value["data"][0]["embedding"].clone()).unwrap();
        assert_eq!(v.len(), EMBEDDING_DIMENSIONS);
        assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-3);

        let b64 = respond(
            Endpoint::Embeddings,
            "e",
            br#"{"model":"e","input":"a","encoding_format":"base64"}"#,
            false,
            false,
            "r",
        )
        .unwrap();
        let value: Value = serde_json::from_slice(&b64.body).unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(value["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(raw.len(), EMBEDDING_DIMENSIONS * 4);
    }

    #[test]
    fn missing_inputs_are_400_naming_the_param() {
        let err = respond(
            Endpoint::Embeddings,
            "e",
            br#"{"model":"e"}"#,
            false,
            false,
            "r",
        )
        .unwrap_err();
        assert_eq!(err.status(), 400);
        assert_eq!(err.param, Some("input"));
    }
}

"""A client traced by the official OpenTelemetry Python SDK (e2e/tests/otel.rs): it opens a
span, injects its context into a chat completion request to the gateway (W3C traceparent), and
exports its span with the SDK's own OTLP/HTTP exporter to the test's receiver. Prints the
span's trace and span ids as JSON.

Settings: OTEL_CLIENT_GATEWAY (base URL), OTEL_CLIENT_KEY, OTEL_CLIENT_MODEL,
OTEL_CLIENT_RECEIVER (the receiver's base URL).
"""

import json
import os
import urllib.request

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "sdk-client"}))
provider.add_span_processor(SimpleSpanProcessor(
    OTLPSpanExporter(endpoint=os.environ["OTEL_CLIENT_RECEIVER"] + "/v1/traces")))
tracer = provider.get_tracer("aisix-e2e")

with tracer.start_as_current_span("ask the gateway") as span:
    headers = {
        "authorization": "Bearer " + os.environ["OTEL_CLIENT_KEY"],
        "content-type": "application/json",
    }
    inject(headers)
    body = json.dumps({
        "model": os.environ["OTEL_CLIENT_MODEL"],
        "messages": [{"role": "user", "content": "hello"}],
    }).encode()
    request = urllib.request.Request(
        os.environ["OTEL_CLIENT_GATEWAY"] + "/v1/chat/completions", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.status
        json.load(response)
    context = span.get_span_context()
    ids = {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}

provider.shutdown()
print(json.dumps(ids))

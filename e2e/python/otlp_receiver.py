"""An OTLP/HTTP receiver for the end-to-end tests (e2e/tests/otel.rs).

Decodes `POST /v1/traces` and `POST /v1/logs` (protobuf, gzip or not) with OpenTelemetry's own
generated classes (the `opentelemetry-proto` package), and appends one JSON line per span or
log record to the file named by OTLP_RECORD, with the resource's attributes and the peer port.
While a file named `refuse` exists in the working directory, every export is answered 503.

With `grpc`, it serves OTLP/gRPC instead (the collector's TraceService and LogsService, with the
stubs opentelemetry-proto generates, on grpcio), on an ephemeral port it names in its startup
line; while `refuse` exists, every export is answered UNAVAILABLE.

With `grpc-tls`, over TLS (cert.pem and key.pem in its working directory); with `grpc-mtls`,
also asking every client for a certificate that client-ca.pem signed.

What the test asks of its answers, by files in the working directory (both protocols):
- `partial` (JSON: `rejected`, `message`): every export is accepted with that partial success,
  built with opentelemetry-proto's response classes;
- `throttle` (a number of seconds): the next export is refused as a throttling collector
  refuses, with 429 and `Retry-After` over HTTP, RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo`
  (googleapis-common-protos' classes) over gRPC; the file is then removed;
- `exhausted`: over gRPC, every export is refused RESOURCE_EXHAUSTED with no RetryInfo;
- `long`: over HTTP, every reply carries 100 KiB more than its message.
Every export is noted as a `try` line (its signal, its time, how it was answered).

Usage: python otlp_receiver.py <listening fd>
       python otlp_receiver.py grpc|grpc-tls|grpc-mtls
"""

import gzip
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

RECORD = os.environ["OTLP_RECORD"]
LOCK = threading.Lock()


def asked(name):
    """The contents of the file `name` the test wrote, or None. `throttle` asks for one
    answer: it is removed as it is read."""
    with LOCK:
        try:
            with open(name) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        if name == "throttle":
            os.remove(name)
        return text


def partial_response(response_class, field):
    """An accepted export's response: with the partial success the test asked for, if any."""
    response = response_class()
    spec = asked("partial")
    if spec is not None:
        spec = json.loads(spec)
        setattr(response.partial_success, field, spec["rejected"])
        response.partial_success.error_message = spec["message"]
    return response


def noted(kind, answered):
    write([{"signal": "try", "kind": kind, "at": time.time(), "answered": answered}])


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value"):
        return str(getattr(any_value, kind))
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(pairs):
    return {kv.key: value(kv.value) for kv in pairs}


def write(lines):
    with LOCK, open(RECORD, "a") as out:
        for line in lines:
            out.write(json.dumps(line) + "\n")


def span_lines(request, common):
    lines = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                lines.append(dict(common, signal="traces", resource=resource,
                                  scope=ss.scope.name,
                                  trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                                  parent_span_id=span.parent_span_id.hex(),
                                  trace_state=span.trace_state, name=span.name,
                                  kind=span.kind, start=span.start_time_unix_nano,
                                  end=span.end_time_unix_nano, flags=span.flags,
                                  status_code=span.status.code,
                                  attributes=attributes(span.attributes)))
    return lines


def log_lines(request, common):
    lines = []
    for rl in request.resource_logs:
        resource = attributes(rl.resource.attributes)
        for sl in rl.scope_logs:
            for log in sl.log_records:
                lines.append(dict(common, signal="logs", resource=resource,
                                  trace_id=log.trace_id.hex(), span_id=log.span_id.hex(),
                                  time=log.time_unix_nano, severity=log.severity_number,
                                  event_name=log.event_name, body=value(log.body),
                                  attributes=attributes(log.attributes)))
    return lines


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b""):
        if os.path.exists("long"):
            body += b"\0" * (100 * 1024)
        self.send_response(status)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        kind = {"/v1/traces": "traces", "/v1/logs": "logs"}.get(self.path)
        if kind is None:
            self.answer(404)
            return
        if os.path.exists("refuse"):
            noted(kind, "refused")
            self.answer(503)
            return
        encoding = self.headers.get("content-encoding")
        if encoding == "gzip":
            body = gzip.decompress(body)
        peer = self.client_address[1]
        common = {"peer_port": peer, "encoding": encoding,
                  "user_agent": self.headers.get("user-agent"),
                  "content_type": self.headers.get("content-type")}
        seconds = asked("throttle")
        if seconds is not None:
            noted(kind, "throttled")
            self.send_response(429)
            self.send_header("retry-after", seconds.strip())
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if kind == "traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            write(span_lines(request, common))
            response = partial_response(ExportTraceServiceResponse, "rejected_spans")
        else:
            request = ExportLogsServiceRequest()
            request.ParseFromString(body)
            write(log_lines(request, common))
            response = partial_response(ExportLogsServiceResponse, "rejected_log_records")
        noted(kind, "accepted")
        self.answer(200, response.SerializeToString())


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fd):
        # The listening socket is the test's, handed over by fd; it is not bound again.
        super().__init__(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self.socket = socket.socket(fileno=fd)


def serve_grpc(tls, mutual=False):
    """OTLP/gRPC: the collector's TraceService and LogsService, served by grpcio with the
    stubs opentelemetry-proto generates. Binds an ephemeral port itself (grpcio takes no
    socket) and names it in the startup line."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    def common(context, kind):
        metadata = dict(context.invocation_metadata())
        if os.path.exists("refuse"):
            context.abort(grpc.StatusCode.UNAVAILABLE, "the receiver refuses")
        if os.path.exists("exhausted"):
            noted(kind, "exhausted")
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "over quota, for good")
        seconds = asked("throttle")
        if seconds is not None:
            noted(kind, "throttled")
            # What grpcio-status's `abort_with_status` sends: the status, its details in
            # `grpc-status-details-bin` (base64 on the wire, as every `-bin` header).
            info = error_details_pb2.RetryInfo()
            info.retry_delay.FromSeconds(int(seconds))
            detail = any_pb2.Any()
            detail.Pack(info)
            status = status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                       message="over quota", details=[detail])
            context.set_trailing_metadata(
                (("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "over quota")
        noted(kind, "accepted")
        auth = context.auth_context()
        security = auth.get("transport_security_type", [b""])[0]
        client = auth.get("x509_common_name", [b""])[0]
        return {"peer": context.peer(), "encoding": metadata.get("grpc-encoding"),
                "user_agent": metadata.get("user-agent"), "protocol": "grpc",
                "transport_security": security.decode(), "client_name": client.decode()}

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            write(span_lines(request, common(context, "traces")))
            return partial_response(ExportTraceServiceResponse, "rejected_spans")

    class Logs(logs_service_pb2_grpc.LogsServiceServicer):
        def Export(self, request, context):
            write(log_lines(request, common(context, "logs")))
            return partial_response(ExportLogsServiceResponse, "rejected_log_records")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
    if tls:
        # cert.pem and key.pem in the working directory: written by the test, which trusts
        # the certificate (for localhost) through SSL_CERT_FILE.
        with open("key.pem", "rb") as key, open("cert.pem", "rb") as cert:
            pair = [(key.read(), cert.read())]
        if mutual:
            with open("client-ca.pem", "rb") as ca:
                credentials = grpc.ssl_server_credentials(
                    pair, root_certificates=ca.read(), require_client_auth=True)
        else:
            credentials = grpc.ssl_server_credentials(pair)
        port = server.add_secure_port("127.0.0.1:0", credentials)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    write([{"signal": "startup", "port": port}])
    server.wait_for_termination()


if __name__ == "__main__":
    if sys.argv[1] in ("grpc", "grpc-tls", "grpc-mtls"):
        serve_grpc(sys.argv[1] != "grpc", mutual=sys.argv[1] == "grpc-mtls")
    else:
        server = Server(int(sys.argv[1]))
        write([{"signal": "startup"}])
        server.serve_forever()

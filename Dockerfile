# syntax=docker/dockerfile:1
# aisix container image: the release binary, built with the locked dependencies, on a distroless
# base, run as a non-root user. Build: docker build -t aisix .
# Run:   docker run -p 3000:3000 -p 9090:9090 -v "$PWD/deploy/kubernetes/files:/etc/aisix:ro" aisix
# Kubernetes probes /livez and /readyz take the place of a Docker HEALTHCHECK (the image has no
# shell or curl to run one with); see deploy/kubernetes/.

# The toolchain named by rust-toolchain.toml.
FROM rust:1.95-bookworm AS build
# protoc and the well-known types: the etcd client's build script compiles etcd's protobuf
# definitions, which import google/protobuf/descriptor.proto.
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, from Cargo.lock only, so a source change reuses their layer.
COPY Cargo.toml Cargo.lock rust-toolchain.toml ./
# Every workspace member, or cargo cannot load the workspace.
COPY crates crates
COPY testkit testkit
COPY e2e e2e
COPY benches benches
# The patched hyper (Cargo.toml, `[patch.crates-io]`).
COPY vendor vendor
RUN cargo fetch --locked
RUN cargo build --release --locked --package aisix-server --bin aisix \
    && install -D -m 0755 target/release/aisix /out/aisix

# glibc and libgcc, CA certificates for https providers, a `nonroot` user (65532); no shell.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /out/aisix /usr/local/bin/aisix
USER 65532:65532
# Proxy and metrics. The metrics listener binds 127.0.0.1 by default: set
# observability.metrics.prometheus.addr to 0.0.0.0:9090 in the config for Prometheus to reach it.
EXPOSE 3000 9090
HEALTHCHECK NONE
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/aisix"]
CMD ["--config", "/etc/aisix/config.yaml"]

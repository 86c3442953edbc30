#!/usr/bin/env bash
# The whole test suite, from a fresh Linux machine that has only the Rust toolchain (and the
# gcc, make and Python 3 that come with it). Installs what the tests need, then runs them:
#   - promtool (Debian package `prometheus`): checks the /metrics page;
#   - taskset (util-linux): starts the gateway under a one-CPU affinity mask;
#   - systemd-analyze (systemd), unshare (util-linux), mount: the operations tests;
#   - the official `openai` Python SDK, in a virtual environment under target/e2e-venv;
#   - the conformance matrix's servers: nginx (Debian), uvicorn and hypercorn (that venv);
#   - tinyproxy: a real forward proxy for the HTTP(S)_PROXY egress tests.
#   - redis-server (Debian package `redis-server`): the shared rate-limit store.
#   - etcd and etcdctl (Debian packages `etcd-server`, `etcd-client`): the shared resources store;
#     protoc (`protobuf-compiler`, with `libprotobuf-dev`'s well-known types) builds the etcd
#     client's protobuf definitions.
#   - npm (Debian package `npm`): installs Claude Code, pinned, under target/e2e-node.
#   - wrk and strace: the benchmark harness's second load generator and system-call counts.
#   - valgrind: the harness's instructions per request (`aisix-bench instr`).
#   - the same npm installs the Codex CLI, pinned, under target/codex (scripts/setup-codex.sh),
#     for the Responses client tests.
# Needs root (or sudo) only when a Debian package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v tinyproxy >/dev/null 2>&1 || missing+=(tinyproxy)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
# protoc: the etcd client's build script compiles etcd's protobuf definitions.
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v strace >/dev/null 2>&1 || missing+=(strace)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# Operations tests: systemd-analyze (the unit file); unshare, mount and chroot (the container's
# conditions).
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v mount >/dev/null 2>&1 || missing+=(mount)
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; }
fi

bash scripts/setup-python.sh
bash scripts/setup-node.sh
bash scripts/setup-codex.sh

# Build everything first, so the end-to-end tests' own build of the binary is a no-op.
cargo build --locked --workspace --all-targets
# The release binary a user runs, built once; release_build.rs and container.rs test this one.
# What they check (no test hook compiled in, the container's conditions) does not depend on
# link-time optimisation, so CI builds it without the profile's fat LTO, which alone took about
# four of CI's minutes on two cores (`cargo build --release` for use keeps it).
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  cargo build --locked --release -p aisix-server
# Every test binary runs even after one fails, so a failure never hides the next one.
E2E_AISIX_RELEASE_BIN="$PWD/target/release/aisix" cargo test --locked --workspace --no-fail-fast

# A few seconds of the benchmark harness, so it cannot rot: every leg must answer correctly;
# nothing about speed is asserted (debug builds, shared machines).
cargo run --locked -q -p aisix-bench -- grid --smoke --providers --aisix-bin target/debug/aisix --baseline-bin target/debug/aisix --out target/bench-smoke
# The regression gate against the merge base with main, in smoke form: it reports the ratios and
# asserts nothing; it skips itself (exit 0) when the merge base is HEAD or does not build.
base=$(git merge-base HEAD main 2>/dev/null || git merge-base HEAD origin/main 2>/dev/null || true)
if [ -n "$base" ]; then
  # Bounded: building another revision from nothing can take longer than the suite allows.
  timeout 300 cargo run --locked -q -p aisix-bench -- compare --rev "$base" --debug --smoke --aisix-bin target/debug/aisix \
    --modes tpc --no-nginx --no-obs-off --no-floor --no-open-loop --no-strace --out target/bench-compare \
    || echo "bench compare against $base did not finish within 300 s: no report (it asserts nothing)"
else
  echo "bench compare skipped: no merge base with main"
fi
# Instructions per request under valgrind, in smoke form (aisix, nginx as one process, the
# static-SSE origin): every answer must be good; no figure is asserted. The release build (made
# above for the e2e tests) starts under valgrind in a fraction of a debug build's time. Bounded.
rc=0
timeout 300 cargo run --locked -q -p aisix-bench -- instr --smoke --aisix-bin target/release/aisix \
  --subjects aisix,nginx --workloads unary,stream-nginx --no-strace --out target/bench-instr || rc=$?
if [ "$rc" = 124 ]; then
  echo "bench instr smoke did not finish within 300 s: no report (it asserts no figure)"
elif [ "$rc" != 0 ]; then
  exit "$rc"
fi

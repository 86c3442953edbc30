#!/usr/bin/env bash
# OpenTelemetry export's cost in instructions per request: the gateway (one worker, the grid's
# config: metrics and access log on) under valgrind's cachegrind (`--cache-sim=no`, every thread
# counted: the worker and the control thread that runs the exporter), driven by wrk against the
# harness's fast mock, with export off, on to a collector that answers (`aisix-bench otlp-sink`)
# and on to one that never answers (`--stalled`). Each leg's total (quanta's clock calibration
# left out: it varies by process) minus an idle run of the same config (start, no load, stop),
# over the requests wrk counted. Deterministic where CPU time on
# a shared machine is not. How to read it: benches/README.md, "OpenTelemetry export in
# instructions".
#
#   cargo build --release -p aisix-server -p aisix-bench
#   bash benches/otel-instr.sh                  # c=32 and c=512, 10 s of load per leg
#   CONCURRENCY="32" SECONDS_PER_LEG=20 LEGS="off on" bash benches/otel-instr.sh
#   OTLP_COMPRESSION=gzip AISIX=/other/build/aisix bash benches/otel-instr.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
AISIX=${AISIX:-$ROOT/target/release/aisix}
BENCH=${BENCH:-$ROOT/target/release/aisix-bench}
CONCURRENCY=${CONCURRENCY:-"32 512"}
SECONDS_PER_LEG=${SECONDS_PER_LEG:-10}
LEGS=${LEGS:-"off on stalled"}
OUT=${OUT:-$ROOT/target/otel-instr}
KEY=sk-aisix-bench-0123456789
BODY='{"model":"bench","messages":[{"role":"user","content":"hello"}]}'

for tool in valgrind wrk curl; do
  command -v "$tool" >/dev/null || { echo "otel-instr: $tool is not installed" >&2; exit 1; }
done
for bin in "$AISIX" "$BENCH"; do
  [[ -x $bin ]] || { echo "otel-instr: $bin not built (cargo build --release -p aisix-server -p aisix-bench)" >&2; exit 1; }
done

rm -rf "$OUT"
mkdir -p "$OUT"
STARTED=()
cleanup() {
  for pid in "${STARTED[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# Starts `$@` with stdout to $1's log and waits for a line matching $2, left in ANNOUNCED.
# Not called in a command substitution: the process must be in this shell's STARTED.
start_announcing() {
  local log=$1 pattern=$2
  shift 2
  "$@" >"$log" 2>&1 &
  STARTED+=($!)
  for _ in $(seq 1 100); do
    if grep -q "$pattern" "$log"; then ANNOUNCED=$(grep -m1 "$pattern" "$log"); return; fi
    sleep 0.1
  done
  echo "otel-instr: $* did not start: $(cat "$log")" >&2
  exit 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_announcing "$OUT/mock.log" "mock listening" "$BENCH" mock --workers 1
MOCK=$(sed 's/.*addr=\([^ ]*\).*/\1/' <<<"$ANNOUNCED")
start_announcing "$OUT/sink.log" "endpoint=" "$BENCH" otlp-sink
SINK=${ANNOUNCED#*endpoint=}
start_announcing "$OUT/stalled.log" "endpoint=" "$BENCH" otlp-sink --stalled
STALLED=${ANNOUNCED#*endpoint=}

cat >"$OUT/wrk.lua" <<EOF
wrk.method = "POST"
wrk.body = [[$BODY]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
EOF

# One run: leg ($1: off, on, stalled) at concurrency $2 (0: idle). Prints
# "<Ir> <requests> <non-2xx> <dropped traces> <dropped logs>".
run() {
  local leg=$1 conc=$2
  local dir="$OUT/$leg-c$conc"
  mkdir -p "$dir"
  local port metrics
  port=$(free_port)
  metrics=$(free_port)
  cat >"$dir/config.yaml" <<EOF
proxy:
  addr: 127.0.0.1:$port
  thread_per_core: true
  workers: 1
observability:
  log_level: warn
  access_log: true
  metrics:
    prometheus: {enabled: true, addr: "127.0.0.1:$metrics"}
upstream:
  pool_max_idle_per_host: 1024
resources_file: resources.yaml
EOF
  cat >"$dir/resources.yaml" <<EOF
_format_version: "1"
provider_keys:
  - {display_name: mock, provider: openai, api_base: "http://$MOCK/v1"}
models:
  - {display_name: bench, provider: openai, model_name: mock-model, provider_key: mock}
api_keys:
  - {display_name: bench, key_env: BENCH_KEY, allowed_models: ["*"]}
EOF
  local env=(BENCH_KEY=$KEY)
  case $leg in
    on) env+=(AISIX_OBSERVABILITY__OTLP__ENABLED=true AISIX_OBSERVABILITY__OTLP__ENDPOINT=$SINK) ;;
    stalled) env+=(AISIX_OBSERVABILITY__OTLP__ENABLED=true AISIX_OBSERVABILITY__OTLP__ENDPOINT=$STALLED) ;;
  esac
  if [[ -n ${OTLP_COMPRESSION:-} ]]; then
    env+=(AISIX_OBSERVABILITY__OTLP__COMPRESSION=$OTLP_COMPRESSION)
  fi
  env "${env[@]}" valgrind --tool=cachegrind --cache-sim=no \
    --cachegrind-out-file="$dir/cachegrind.out" --log-file="$dir/valgrind.log" \
    "$AISIX" --config "$dir/config.yaml" >"$dir/gateway.out" 2>"$dir/gateway.err" &
  local pid=$!
  STARTED+=($pid)
  local ready=
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.2
  done
  [[ -n $ready ]] || { echo "otel-instr: the gateway never became ready: $(tail -5 "$dir/gateway.err")" >&2; exit 1; }
  local requests=0 non2xx=0
  if ((conc > 0)); then
    wrk -t1 -c"$conc" -d"${SECONDS_PER_LEG}s" --timeout 60s -s "$OUT/wrk.lua" \
      "http://127.0.0.1:$port/v1/chat/completions" >"$dir/wrk.out" 2>&1
    requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$dir/wrk.out")
    non2xx=$(sed -n 's/.*Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p' "$dir/wrk.out")
  else
    sleep "$SECONDS_PER_LEG"
  fi
  curl -sf "http://127.0.0.1:$metrics/metrics" >"$dir/metrics.txt" || true
  local dropped_traces dropped_logs
  dropped_traces=$(sed -n 's/^aisix_otel_dropped_total{signal="traces"} \([0-9]*\).*/\1/p' "$dir/metrics.txt")
  dropped_logs=$(sed -n 's/^aisix_otel_dropped_total{signal="logs"} \([0-9]*\).*/\1/p' "$dir/metrics.txt")
  kill -TERM "$pid"
  wait "$pid" || true
  local ir
  # Every function's count but quanta's clock calibration (the metrics exporter's, once per
  # process): it loops until the TSC reads steady, so its count differs from one process to the
  # next by millions, which no idle run can subtract. A shipped (fat-LTO) build has no function
  # of that name: the calibration is inlined into the once-cell initializer that runs it, which
  # is left out too (it runs once per process, never per request).
  ir=$(awk '/^fn=/ { skip = ($0 ~ /quanta::Calibration|once_cell::imp::OnceCell<T>::initialize::\{\{closure\}\}/) }
            /^[0-9]/ { if (!skip) total += $2 }
            END { if (total > 0) printf "%.0f", total }' "$dir/cachegrind.out")
  [[ -n $ir ]] || { echo "otel-instr: no instruction count in $dir/cachegrind.out" >&2; exit 1; }
  echo "$ir $requests ${non2xx:-0} ${dropped_traces:-0} ${dropped_logs:-0}"
}

declare -A IDLE PER
printf '%-8s %5s %9s %8s %14s %10s %8s %s\n' leg c requests non-2xx "Ir" "Ir/req" "÷ off" "dropped (traces, logs)"
for leg in $LEGS; do
  run "$leg" 0 >"$OUT/result"
  read -r ir _ _ _ _ <"$OUT/result"
  IDLE[$leg]=$ir
  printf '%-8s %5s %9s %8s %14s %10s %8s\n' "$leg" idle 0 0 "$ir" - -
done
for conc in $CONCURRENCY; do
  for leg in $LEGS; do
    run "$leg" "$conc" >"$OUT/result"
    read -r ir requests non2xx dt dl <"$OUT/result"
    if ((requests == 0)); then echo "otel-instr: $leg c=$conc served nothing" >&2; exit 1; fi
    per=$(((ir - IDLE[$leg]) / requests))
    PER[$leg-$conc]=$per
    ratio=-
    if [[ -n ${PER[off-$conc]:-} ]]; then
      ratio=$(awk -v a="$per" -v b="${PER[off-$conc]}" 'BEGIN { printf "%.3f", a / b }')
    fi
    printf '%-8s %5s %9s %8s %14s %10s %8s %s\n' "$leg" "$conc" "$requests" "$non2xx" "$ir" "$per" "$ratio" "$dt, $dl"
  done
done
echo "per-function counts: cg_annotate $OUT/<leg>-c<c>/cachegrind.out"

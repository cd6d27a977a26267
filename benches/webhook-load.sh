#!/usr/bin/env bash
# Load test (a benchmark, not a test): `sandcap run --webhook-only --tls-self-signed` against a
# trivial handler on the same axum+rustls stack (examples/trivial-tls-server.rs), both loaded with
# oha over TLS with keep-alive, 50 connections, and a realistic 3.9 KB provider AdmissionReview.
# Then the webhook again at half its peak rate, for latency under normal load, and the trivial
# handler at that same rate (the tail the machine adds by itself: oha shares the two cores).
#
#   benches/webhook-load.sh            # DURATION=20s CONNECTIONS=50 by default
#
# Prints reviews/s and p50/p99 for each run and the webhook/trivial throughput ratio.
# Targets on a 2-core machine: ratio >= 0.85; p99 < 2 ms at half the peak rate.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-50}
BODY=benches/provider-review.json
# Three free ports, so a stale server elsewhere can never answer in place of the one measured.
read -r WEBHOOK ADMIN TRIVIAL < <(python3 -c 'import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*("127.0.0.1:%d" % s.getsockname()[1] for s in socks))')

command -v oha >/dev/null || cargo install oha --locked
cargo build --release --locked --bin sandcap --example trivial-tls-server

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
target/release/sandcap run --webhook-only --tls-self-signed --webhook-addr "$WEBHOOK" --admin-addr "$ADMIN" >/dev/null &
pids+=($!)
target/release/examples/trivial-tls-server "$TRIVIAL" 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://$ADMIN/readyz" >/dev/null && curl -sfk -o /dev/null -X POST "https://$TRIVIAL/validate" && break
  sleep 0.1
done
curl -sf "http://$ADMIN/readyz" >/dev/null
for p in "${pids[@]}"; do kill -0 "$p"; done

# One oha run; prints "rps p50_ms p99_ms success_rate".
load() {
  local url=$1 duration=$2; shift 2
  oha --no-tui --insecure --output-format json -z "$duration" -c "$CONNECTIONS" -m POST \
      -T application/json -D "$BODY" "$@" "$url" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); p=s["latencyPercentiles"]
print("%.0f %.3f %.3f %.4f" % (s["summary"]["requestsPerSec"], p["p50"]*1e3, p["p99"]*1e3, s["summary"]["successRate"]))'
}

# The webhook must answer the body with a real review, not an error.
curl -sfk -X POST -H 'Content-Type: application/json' --data-binary @"$BODY" "https://$WEBHOOK/validate" | grep -q '"allowed":true'

echo "warming up..."
load "https://$TRIVIAL/validate" 3s >/dev/null
load "https://$WEBHOOK/validate" 3s >/dev/null

read -r t_rps t_p50 t_p99 t_ok < <(load "https://$TRIVIAL/validate" "$DURATION")
read -r w_rps w_p50 w_p99 w_ok < <(load "https://$WEBHOOK/validate" "$DURATION")
half=$((w_rps / 2))
read -r h_rps h_p50 h_p99 h_ok < <(load "https://$WEBHOOK/validate" "$DURATION" -q "$half" --latency-correction)
# The same rate on the trivial handler: what the machine itself adds to the tail.
read -r th_rps th_p50 th_p99 th_ok < <(load "https://$TRIVIAL/validate" "$DURATION" -q "$half" --latency-correction)

printf '\n%-34s %10s %9s %9s %8s\n' "run ($CONNECTIONS connections, $DURATION)" "reviews/s" "p50 ms" "p99 ms" "success"
printf '%-34s %10s %9s %9s %8s\n' "trivial handler, peak" "$t_rps" "$t_p50" "$t_p99" "$t_ok"
printf '%-34s %10s %9s %9s %8s\n' "webhook, peak" "$w_rps" "$w_p50" "$w_p99" "$w_ok"
printf '%-34s %10s %9s %9s %8s\n' "webhook at half peak ($half/s)" "$h_rps" "$h_p50" "$h_p99" "$h_ok"
printf '%-34s %10s %9s %9s %8s\n' "trivial handler at $half/s" "$th_rps" "$th_p50" "$th_p99" "$th_ok"
python3 - "$w_rps" "$t_rps" "$h_p99" <<'PY'
import sys
webhook, trivial, p99 = map(float, sys.argv[1:])
ratio = webhook / trivial
print(f"\nwebhook/trivial throughput: {ratio:.3f} (target >= 0.85: {'met' if ratio >= 0.85 else 'MISSED'})")
print(f"p99 at half peak: {p99:.3f} ms (target < 2 ms: {'met' if p99 < 2 else 'MISSED'})")
PY

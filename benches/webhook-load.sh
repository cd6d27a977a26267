#!/usr/bin/env bash
# Load test (a benchmark, not a test): `sandcap run --webhook-only --tls-self-signed` against a
# trivial handler on the same axum+rustls stack (examples/trivial-tls-server.rs), both loaded with
# oha over TLS with keep-alive, 50 connections, and a realistic 3.9 KB provider AdmissionReview,
# in interleaved rounds. Then the webhook at half its peak rate, for latency under normal load, and
# the trivial handler at that same rate (the tail the machine adds by itself: oha shares the cores).
#
#   benches/webhook-load.sh            # DURATION=10s CONNECTIONS=50 ROUNDS=3 by default
#
# Prints reviews/s, p50/p99 and the server's CPU time per request for each run, then the medians:
# the webhook/trivial throughput ratio and the p99 at half peak. Targets on a 2-core machine:
# ratio >= 0.85; p99 < 2 ms at half the peak rate.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-50}
ROUNDS=${ROUNDS:-3}
BODY=benches/provider-review.json

command -v oha >/dev/null || cargo install oha --locked
cargo build --release --locked --bin sandcap --example trivial-tls-server

pids=()
tmp=$(mktemp -d)
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
# Both on port 0, the ports read back (never a free port released and bound later, which another
# process may take meanwhile), so a stale server elsewhere can never answer in place of the one
# measured. No drain window: the trap's SIGTERM should stop it at once.
target/release/sandcap run --webhook-only --tls-self-signed --shutdown-drain-window 0s \
  --webhook-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --listen-report "$tmp/listening" >/dev/null &
pids+=($!)
target/release/examples/trivial-tls-server 127.0.0.1:0 2>"$tmp/trivial.log" &
pids+=($!)
for _ in $(seq 100); do
  [ -f "$tmp/listening" ] && grep -q '^trivial handler listening' "$tmp/trivial.log" && break
  sleep 0.1
done
WEBHOOK=$(awk '$1 == "webhook" { print $2 }' "$tmp/listening")
ADMIN=$(awk '$1 == "admin" { print $2 }' "$tmp/listening")
TRIVIAL=$(sed -n 's|^trivial handler listening on https://\(.*\)/validate$|\1|p' "$tmp/trivial.log")
for _ in $(seq 100); do
  curl -sf "http://$ADMIN/readyz" >/dev/null && curl -sfk -o /dev/null -X POST "https://$TRIVIAL/validate" && break
  sleep 0.1
done
curl -sf "http://$ADMIN/readyz" >/dev/null
for p in "${pids[@]}"; do kill -0 "$p"; done

# CPU seconds (user + system) a process has used so far.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }

# One oha run against one server; prints "rps p50_ms p99_ms success_rate server_cpu_us_per_request".
load() {
  local pid=$1 url=$2 duration=$3; shift 3
  local before after
  before=$(cpu "$pid")
  oha --no-tui --insecure --output-format json -z "$duration" -c "$CONNECTIONS" -m POST \
      -T application/json -D "$BODY" "$@" "$url" >"$tmp/oha.json"
  after=$(cpu "$pid")
  python3 - "$tmp/oha.json" "$before" "$after" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); p = s["latencyPercentiles"]; summary = s["summary"]
requests = summary["requestsPerSec"] * summary["total"]
cpu_us = (float(sys.argv[3]) - float(sys.argv[2])) * 1e6 / max(requests, 1)
print("%.0f %.3f %.3f %.4f %.1f" % (summary["requestsPerSec"], p["p50"] * 1e3, p["p99"] * 1e3, summary["successRate"], cpu_us))
PY
}

# The webhook must answer the body with a real review, not an error.
curl -sfk -X POST -H 'Content-Type: application/json' --data-binary @"$BODY" "https://$WEBHOOK/validate" | grep -q '"allowed":true'

echo "warming up..."
load "${pids[1]}" "https://$TRIVIAL/validate" 3s >/dev/null
load "${pids[0]}" "https://$WEBHOOK/validate" 3s >/dev/null

# Interleaved rounds: the machine's background load drifts, so each ratio compares runs taken
# seconds apart, and the median of the rounds is reported.
row() { printf '%-38s %10s %9s %9s %8s %12s\n' "$@"; }
row "run ($CONNECTIONS connections, $DURATION)" "reviews/s" "p50 ms" "p99 ms" "success" "server µs/req"
: >"$tmp/peaks"
for round in $(seq "$ROUNDS"); do
  read -r t_rps t_p50 t_p99 t_ok t_cpu < <(load "${pids[1]}" "https://$TRIVIAL/validate" "$DURATION")
  read -r w_rps w_p50 w_p99 w_ok w_cpu < <(load "${pids[0]}" "https://$WEBHOOK/validate" "$DURATION")
  row "round $round: trivial handler, peak" "$t_rps" "$t_p50" "$t_p99" "$t_ok" "$t_cpu"
  row "round $round: webhook, peak" "$w_rps" "$w_p50" "$w_p99" "$w_ok" "$w_cpu"
  echo "$t_rps $w_rps" >>"$tmp/peaks"
done
half=$(python3 -c 'import statistics, sys
print(int(statistics.median(float(l.split()[1]) for l in open(sys.argv[1])) / 2))' "$tmp/peaks")
: >"$tmp/tails"
for round in $(seq "$ROUNDS"); do
  # At a fixed rate (half the webhook's median peak), with oha correcting for coordinated omission.
  read -r h_rps h_p50 h_p99 h_ok h_cpu < <(load "${pids[0]}" "https://$WEBHOOK/validate" "$DURATION" -q "$half" --latency-correction)
  read -r th_rps th_p50 th_p99 th_ok th_cpu < <(load "${pids[1]}" "https://$TRIVIAL/validate" "$DURATION" -q "$half" --latency-correction)
  row "round $round: webhook at $half/s" "$h_rps" "$h_p50" "$h_p99" "$h_ok" "$h_cpu"
  row "round $round: trivial handler at $half/s" "$th_rps" "$th_p50" "$th_p99" "$th_ok" "$th_cpu"
  echo "$h_p99 $th_p99" >>"$tmp/tails"
done

python3 - "$tmp/peaks" "$tmp/tails" <<'PY'
import statistics, sys
peaks = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
tails = [tuple(map(float, l.split())) for l in open(sys.argv[2])]
ratio = statistics.median(w / t for t, w in peaks)
p99 = statistics.median(w for w, _ in tails)
baseline_p99 = statistics.median(t for _, t in tails)
print(f"\nmedian of {len(peaks)} rounds:")
print(f"webhook/trivial throughput: {ratio:.3f} (target >= 0.85: {'met' if ratio >= 0.85 else 'MISSED'})")
print(f"webhook p99 at half peak: {p99:.3f} ms (target < 2 ms: {'met' if p99 < 2 else 'MISSED'}); "
      f"trivial handler at the same rate: {baseline_p99:.3f} ms")
PY

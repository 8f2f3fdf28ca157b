#!/usr/bin/env bash
# bench-http.sh: loopback load of `flashgate serve` next to a bare fasthttp
# server returning a constant, both under the same wrk in the same run, for
# (a) the sold-out path, (b) the item page, (c) the purchase path with a
# large stock. Prints each figure (mean of ROUNDS alternating runs) and its
# ratio to the bare server.
# Needs redis-server and wrk. Everything listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-8s}
CONNS=${CONNS:-128}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
for c in redis-server wrk curl; do
  command -v "$c" >/dev/null || { echo "bench-http: $c not found (apt-get install redis-server wrk curl)" >&2; exit 1; }
done
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d /tmp/flashgate-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT INT TERM

go build -o "$dir/flashgate" ./cmd/flashgate
go build -o "$dir/bare" ./scripts/bare
rp=$(port); gp=$(port); ap=$(port); bp=$(port)
redis-server --port "$rp" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 & pids+=($!)
"$dir/bare" "127.0.0.1:$bp" & pids+=($!)
export FLASHGATE_JWT_SECRET=bench-secret-$RANDOM$RANDOM FLASHGATE_ADMIN_TOKEN=bench-admin-$RANDOM$RANDOM
sleep 0.3
"$dir/flashgate" serve --redis "redis://127.0.0.1:$rp/0" --db "sqlite://$dir/orders.db" \
  --listen "127.0.0.1:$gp" --admin-listen "127.0.0.1:$ap" --log-level warn 2>"$dir/serve.log" & pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$gp/readyz" >/dev/null && break; sleep 0.1; done

admin() { curl -sf -H "Authorization: Bearer $FLASHGATE_ADMIN_TOKEN" -H 'Content-Type: application/json' "$@"; }
A="http://127.0.0.1:$ap"; G="http://127.0.0.1:$gp"; B="http://127.0.0.1:$bp"
admin -X POST "$A/admin/sales" -d '{"id":"soldout","name":"Sold out","price_cents":100,"total":1}' >/dev/null
admin -X POST "$A/admin/sales" -d '{"id":"page","name":"Item page","price_cents":2500,"total":100}' >/dev/null
admin -X POST "$A/admin/sales" -d '{"id":"big","name":"Large stock","price_cents":100,"total":1000000,"per_user":1}' >/dev/null
admin -X POST "$A/admin/sales/soldout/start" >/dev/null
admin -X POST "$A/admin/sales/big/start" >/dev/null
sleep 0.2
first=$("$dir/flashgate" token --user first)
curl -sf -X POST -H "Authorization: Bearer $first" "$G/api/sales/soldout/orders" >/dev/null
sleep 0.2
tok=$("$dir/flashgate" token --user crowd)
PER_ROUND=${PER_ROUND:-250000} # more purchases than one run of DURATION makes here
"$dir/flashgate" token --user-prefix buyer- --count $((PER_ROUND * ROUNDS)) >"$dir/tokens.txt"

rate() { # wrk output → requests/s
  awk '/^Requests\/sec:/ {print $2}'
}
run() { # name url [script [script args...]]
  local name=$1 url=$2 script=${3:-}; shift 2; shift || true
  if [ -n "$script" ]; then
    wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$script" "$url" -- "$@" >"$dir/$name.txt" 2>&1 || true
  else
    wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$url" >"$dir/$name.txt" 2>&1 || true
  fi
  rate <"$dir/$name.txt"
}
printf '%-28s %12s %12s %7s\n' path "flashgate/s" "bare/s" ratio
line() {
  printf '%-28s %12.0f %12.0f %7.2f\n' "$1" "$2" "$3" "$(awk -v a="$2" -v b="$3" 'BEGIN{print (b>0)?a/b:0}')"
}
printf 'wrk.method="POST"\nwrk.headers["Authorization"]="Bearer %s"\n' "$tok" >"$dir/soldout.lua"
# pair NAME LABEL PATH [script args...]: ROUNDS alternating runs of bare and
# flashgate on the same path, so that drift in the machine hits both alike.
pair() {
  local name=$1 label=$2 path=$3; shift 3
  local bs=0 gs=0 r
  for r in $(seq "$ROUNDS"); do
    # A script with arguments also gets the round's token offset, so that no
    # buyer repeats across rounds (purchase.lua).
    local args=("$@")
    [ $# -gt 1 ] && args+=($(( (r - 1) * PER_ROUND )))
    bs=$(awk -v a="$bs" -v b="$(run "bare-$name" "$B$path" "${args[@]}")" 'BEGIN{print a+b}')
    gs=$(awk -v a="$gs" -v b="$(run "$name" "$G$path" "${args[@]}")" 'BEGIN{print a+b}')
  done
  line "$label" "$(awk -v a="$gs" -v n="$ROUNDS" 'BEGIN{print a/n}')" "$(awk -v a="$bs" -v n="$ROUNDS" 'BEGIN{print a/n}')"
}
pair soldout "(a) sold-out purchase" /api/sales/soldout/orders "$dir/soldout.lua"
pair page "(b) item page" /sales/page
pair purchase "(c) purchase, large stock" /api/sales/big/orders scripts/purchase.lua "$dir/tokens.txt" "$THREADS"
echo
for f in soldout purchase; do echo "answers of $f: $(grep -E 'requests in|Non-2xx|Socket errors' "$dir/$f.txt" | tr -s ' ' | tr '\n' ' ')"; done
echo "units sold in (c): $(admin "$A/admin/sales/big" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["booked"], "booked,", d["stream_backlog"], "in the stream")')"
grep -A4 'Latency Distribution' "$dir/purchase.txt" | sed 's/^/  (c) /' || true

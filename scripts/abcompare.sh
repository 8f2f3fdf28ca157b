#!/usr/bin/env bash
# abcompare.sh A B: two flashgate builds side by side on loopback, each on its
# own redis-server and SQLite file, measured with wrk in alternating rounds
# (A first in odd rounds, B first in even ones): a sold-out rejection with one
# buyer's token (scripts/post.lua) and a purchase by a new buyer every request
# (scripts/purchase.lua). Each round prints both builds' requests/s and their
# server's CPU time per request (user + system, /proc); the end prints B/A of
# each figure per round and their geometric mean. On a shared machine trust
# the ratios, not the absolute figures.
#   ROUNDS (10), DUR (wrk duration, 2s), CONNS (64), PORT (first of six
#   loopback ports, 16480).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BINARY_A BINARY_B" >&2; exit 2; }
scripts=$(cd "$(dirname "$0")" && pwd)
bin=("$1" "$2")
rounds=${ROUNDS:-10} dur=${DUR:-2s} conns=${CONNS:-64} port=${PORT:-16480}
dir=$(mktemp -d)
secret=abcompare-secret-abcompare-secret admin=abcompare-admin
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"' EXIT
srv=()
for i in 0 1; do
	redis-server --port $((port + i)) --save '' --appendonly no >"$dir/redis-$i.log" 2>&1 &
	pids+=($!)
done
for i in 0 1; do
	"${bin[$i]}" serve --redis "redis://127.0.0.1:$((port + i))/0" --db "sqlite://$dir/$i.db" \
		--jwt-secret "$secret" --admin-token "$admin" --sale-rate 1000000 \
		--listen "127.0.0.1:$((port + 2 + i))" --admin-listen "127.0.0.1:$((port + 4 + i))" >"$dir/serve-$i.log" 2>&1 &
	pids+=($!)
	srv[i]=$!
done
token() { "${bin[0]}" token --jwt-secret "$secret" "$@"; }
for i in 0 1; do
	pub=http://127.0.0.1:$((port + 2 + i)) adm=http://127.0.0.1:$((port + 4 + i))
	for _ in $(seq 150); do curl -sf "$pub/readyz" >/dev/null && break; sleep 0.2; done
	for s in "soldout 1" "buy 1000000"; do
		# shellcheck disable=SC2086 # split on purpose
		set -- $s
		curl -sf -H "Authorization: Bearer $admin" -X POST "$adm/admin/sales" \
			-d "{\"id\":\"$1\",\"name\":\"$1\",\"price_cents\":100,\"total\":$2}" >/dev/null
		curl -sf -H "Authorization: Bearer $admin" -X POST "$adm/admin/sales/$1/start" >/dev/null
	done
	# The one unit of the sold-out sale, bought once the gateway has the sale.
	first=$(token --user first)
	for _ in $(seq 50); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $first" -X POST "$pub/api/sales/soldout/orders")" = 201 ] && break
		sleep 0.2
	done
done
loser=$(token --user loser)
for i in 0 1; do
	for _ in $(seq 50); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $loser" -X POST "http://127.0.0.1:$((port + 2 + i))/api/sales/soldout/orders")" = 409 ] && break
		sleep 0.2
	done
done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # 1/100 s of user and system time
# run I ARGS...: wrk against build I; prints "requests/s cpu-µs-per-request".
run() {
	local i=$1 c0 c1 out n
	shift
	c0=$(ticks "${srv[$i]}")
	out=$(wrk -t2 -c"$conns" -d"$dur" "$@" 2>&1)
	c1=$(ticks "${srv[$i]}")
	n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
	echo "$(echo "$out" | sed -n 's/^Requests\/sec: *//p') $(awk -v c=$((c1 - c0)) -v n="$n" 'BEGIN { printf "%.2f", c * 10000 / n }')"
}
for r in $(seq "$rounds"); do
	order="0 1"
	[ $((r % 2)) = 0 ] && order="1 0"
	for i in $order; do
		pub=http://127.0.0.1:$((port + 2 + i))
		so=$(run "$i" -H "Authorization: Bearer $loser" -s "$scripts/post.lua" "$pub/api/sales/soldout/orders")
		token --count 40000 --user-prefix "r$r-$i-" >"$dir/tokens"
		pu=$(run "$i" -s "$scripts/purchase.lua" "$pub/api/sales/buy/orders" -- "$dir/tokens" 2)
		# shellcheck disable=SC2086 # split on purpose
		set -- $so $pu
		echo "round $r $( [ "$i" = 0 ] && echo A || echo B ) soldout_rps=$1 soldout_cpu_us=$2 purchase_rps=$3 purchase_cpu_us=$4"
	done
done | tee "$dir/rounds"
awk '{ r = $2; b = $3; for (f = 4; f <= NF; f++) { split($f, kv, "="); v[r, b, kv[1]] = kv[2]; names[f] = kv[1] } last = r }
END {
	for (f = 4; f in names; f++) {
		k = names[f]; s = 0; n = 0; each = ""
		for (r = 1; r <= last; r++) if (v[r, "A", k] > 0 && v[r, "B", k] > 0) {
			x = v[r, "B", k] / v[r, "A", k]; s += log(x); n++; each = each sprintf(" %.2f", x)
		}
		if (n) printf "%-16s B/A geometric mean %.3f over %d rounds; each:%s\n", k, exp(s / n), n, each
	}
}' "$dir/rounds"

#!/usr/bin/env bash
# check.sh validates everything under deploy/ without a cluster and without
# touching the system's configuration: every server it starts listens on
# loopback and keeps its files in a temporary directory that is removed on exit.
#
#   deploy/check.sh [shell] [redis] [nginx] [monitoring] [k8s]   (default: all)
#
#   shell  bash -n and shellcheck (if installed) on the scripts; cluster.sh
#          refuses to start without bin/flashgate, with a clear message.
#   redis  primary.conf and replica.conf load in redis-server; the replica
#          syncs, refuses writes; AOF on, noeviction on both; a Sentinel on
#          sentinel.conf watches the primary and finds the replica.
#   nginx  nginx -t on the configuration cluster.sh renders from
#          nginx/flashgate.conf, then nginx in front of two stub gateways:
#          the micro-cache serves GET /api/sales/{id} and /sales/{id} and
#          never purchases or orders; Authorization reaches the gateway;
#          /admin and /metrics are refused; one buyer (token) always reaches
#          the same gateway, many buyers reach both; the per-buyer purchase
#          limit answers 429 in the API's JSON, while 300 buyers from one
#          address get none; tokens in item-page URLs reach neither the
#          access log nor the cache key; a dead upstream answers 503
#          {"error":"unavailable"}; nginx -t on a copy of Debian's stock
#          /etc/nginx with flashgate.conf installed as the README says.
#   monitoring  deploy/prometheus: promtool check rules and promtool test
#          rules (the alerts fire on the series they should); deploy/grafana:
#          the dashboard is valid JSON with unique panel ids, every query is
#          valid PromQL (promtool check rules on them as recording rules),
#          and every flashgate_* metric a query or rule names is defined in
#          the Go code; every alert has a test in which it fires;
#          prometheus.yml passes promtool check config and, in a real
#          Prometheus fed the pods as a file, labels one target per pod
#          with pod, namespace, tier and job. Without promtool (Debian: apt-get install
#          prometheus) the PromQL parts SKIP, or FAIL when $CI is set.
#   k8s    the NetworkPolicies against every flow of k8s/check/flows.yaml
#          (cyclonus), and the same check refusing the policy of issue 20;
#          every manifest strictly against the Kubernetes 1.32 API
#          (k8s/check/schema); every manifest parses (python3 yaml), has kind and name, both
#          kustomizations list existing files and never the Secret template,
#          which holds only placeholders; the edge examples (k8s/edge:
#          Ingress, Gateway API) parse and hash on the buyer's token with the
#          limits of nginx/flashgate.conf; kubectl kustomize deploy/ builds,
#          if kubectl is installed; every flashgate
#          tier's pod carries the prometheus.io/scrape, port and path
#          annotations, the port being one its container declares.
#
# A part whose tool is missing (nginx, python3 yaml) is reported as SKIP.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flashgate-deploy-check.XXXXXX")
# nginx workers run as nobody when this runs as root; let them reach tmp.
chmod 0711 "$tmp"
started=()

cleanup() {
	local pid
	for pid in "${started[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${started[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

failures=0
pass() { echo "PASS $*"; }
fail() {
	echo "FAIL $*"
	failures=$((failures + 1))
}
skip() { echo "SKIP $*"; }

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# await CMD... retries CMD for at most 10 s.
await() {
	for _ in $(seq 1 100); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

check_shell() {
	local f
	for f in "$here"/local/cluster.sh "$here"/check.sh; do
		if bash -n "$f"; then pass "bash -n ${f#"$here"/}"; else fail "bash -n ${f#"$here"/}"; fi
		if command -v shellcheck >/dev/null 2>&1; then
			if shellcheck -x "$f"; then pass "shellcheck ${f#"$here"/}"; else fail "shellcheck ${f#"$here"/}"; fi
		else
			skip "shellcheck ${f#"$here"/} (shellcheck not installed)"
		fi
	done
	local out rc=0
	out=$(FLASHGATE_BIN="$tmp/no-such-flashgate" FLASHGATE_CLUSTER_DIR="$tmp/cluster" \
		"$here/local/cluster.sh" up 2>&1) || rc=$?
	if [ "$rc" -ne 0 ] && grep -q "make build" <<<"$out" && [ ! -e "$tmp/cluster" ]; then
		pass "cluster.sh up without bin/flashgate fails clearly: $out"
	else
		fail "cluster.sh up without bin/flashgate: rc=$rc, output: $out"
	fi
}

check_redis() {
	if ! command -v redis-server >/dev/null 2>&1; then
		skip "redis (redis-server not installed)"
		return
	fi
	local p r
	p=$(free_port)
	r=$(free_port)
	mkdir -p "$tmp/redis-p" "$tmp/redis-r"
	redis-server "$here/redis/primary.conf" --port "$p" --bind 127.0.0.1 --dir "$tmp/redis-p" \
		--daemonize no >"$tmp/redis-p.log" 2>&1 &
	started+=($!)
	if ! await redis-cli -p "$p" ping; then
		fail "primary.conf does not start:"
		tail -n 20 "$tmp/redis-p.log"
		return
	fi
	pass "primary.conf loads (redis-server on 127.0.0.1:$p)"
	redis-server "$here/redis/replica.conf" --port "$r" --bind 127.0.0.1 --dir "$tmp/redis-r" \
		--daemonize no --replicaof 127.0.0.1 "$p" >"$tmp/redis-r.log" 2>&1 &
	started+=($!)
	if ! await redis-cli -p "$r" ping; then
		fail "replica.conf does not start:"
		tail -n 20 "$tmp/redis-r.log"
		return
	fi
	pass "replica.conf loads (redis-server on 127.0.0.1:$r)"
	if await sh -c "redis-cli -p $r info replication | grep -q '^master_link_status:up'"; then
		pass "replica synced with the primary"
	else
		fail "replica did not sync with the primary"
	fi

	local got
	expect_config() { # PORT NAME WANT
		got=$(redis-cli -p "$1" config get "$2" | sed -n 2p)
		if [ "$got" = "$3" ]; then pass "port $1: $2 = $3"; else fail "port $1: $2: got $got, want $3"; fi
	}
	expect_config "$p" appendonly yes
	expect_config "$p" appendfsync everysec
	expect_config "$p" maxmemory-policy noeviction
	expect_config "$p" save ""
	expect_config "$p" min-replicas-to-write 0
	expect_config "$r" replica-read-only yes
	expect_config "$r" maxmemory-policy noeviction

	redis-cli -p "$p" set fg:check 1 >/dev/null
	if await sh -c "[ \"\$(redis-cli -p $r get fg:check)\" = 1 ]"; then
		pass "a write on the primary reaches the replica"
	else
		fail "a write on the primary did not reach the replica"
	fi
	got=$(redis-cli -p "$r" set fg:check 2 2>&1 || true)
	if grep -q READONLY <<<"$got"; then pass "replica refuses writes"; else fail "replica write: got $got, want READONLY"; fi
	if [ -d "$tmp/redis-p/appendonlydir" ]; then pass "primary writes its AOF"; else fail "primary has no appendonlydir"; fi

	# sentinel.conf, with the monitor line cluster.sh writes: a Sentinel
	# starts on it and finds the primary and its replica.
	local sp
	sp=$(free_port)
	mkdir -p "$tmp/sentinel"
	sed "s/^sentinel monitor flashgate .*/sentinel monitor flashgate 127.0.0.1 $p 2/" "$here/redis/sentinel.conf" >"$tmp/sentinel/sentinel.conf"
	redis-server "$tmp/sentinel/sentinel.conf" --sentinel --port "$sp" --bind 127.0.0.1 --dir "$tmp/sentinel" >"$tmp/sentinel.log" 2>&1 &
	started+=($!)
	if await sh -c "redis-cli -p $sp sentinel master flashgate | tr -d '\r' | paste -sd' ' | grep -q ' num-slaves 1 '"; then
		pass "sentinel.conf loads; the Sentinel watches the primary (quorum $(redis-cli -p "$sp" sentinel master flashgate | tr -d '\r' | sed -n '/^quorum$/{n;p}')) and finds its replica"
	else
		fail "sentinel.conf: the Sentinel did not find the primary and its replica:"
		tail -n 20 "$tmp/sentinel.log"
	fi
	redis-cli -p "$sp" shutdown >/dev/null 2>&1 || true

	redis-cli -p "$r" shutdown nosave >/dev/null 2>&1 || true
	redis-cli -p "$p" shutdown >/dev/null 2>&1 || true
}

check_nginx() {
	if ! command -v nginx >/dev/null 2>&1; then
		skip "nginx (not installed; Debian: apt-get install nginx)"
		return
	fi
	if ! command -v python3 >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
		skip "nginx (needs python3 and curl for the stub gateway)"
		return
	fi
	# Two stub gateways in one process: each answers every request with what
	# it received, which gateway (port) it is and how many times the two have
	# seen that method and path, and says "no-store" so that only nginx's own
	# micro-cache settings can make it cacheable.
	local gw gw2 np
	gw=$(free_port)
	gw2=$(free_port)
	np=$(free_port)
	cat >"$tmp/stub.py" <<'EOF'
import http.server, json, sys, threading
counts, lock = {}, threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        key = self.command + " " + self.path
        if self.path.startswith("/__count/"):
            with lock:
                c = counts.get(self.path[len("/__count/"):].replace("_", " ", 1), 0)
            body = str(c).encode()
        else:
            with lock:
                counts[key] = counts.get(key, 0) + 1
                c = counts[key]
            body = json.dumps({"seen": key, "n": c, "gw": self.server.server_address[1],
                               "auth": self.headers.get("Authorization", ""),
                               "ae": self.headers.get("Accept-Encoding", "")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    do_GET = do_POST = do_HEAD = answer
    def log_message(self, *a):
        pass
servers = [http.server.ThreadingHTTPServer(("127.0.0.1", int(p)), H) for p in sys.argv[1:]]
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
servers[0].serve_forever()
EOF
	python3 "$tmp/stub.py" "$gw" "$gw2" >"$tmp/stub.log" 2>&1 &
	local stub=$!
	started+=("$stub")
	if ! await curl -sf "http://127.0.0.1:$gw/healthz" || ! await curl -sf "http://127.0.0.1:$gw2/healthz"; then
		fail "stub gateway did not start"
		return
	fi

	local nd=$tmp/nginx
	if ! "$here/local/cluster.sh" nginx-config "$nd" "127.0.0.1:$np" "127.0.0.1:$gw" "127.0.0.1:$gw2"; then
		fail "cluster.sh nginx-config"
		return
	fi
	if nginx -t -p "$nd" -c "$nd/nginx.conf" -e "$nd/logs/error.log" >"$tmp/nginx-t.log" 2>&1; then
		pass "nginx -t on nginx/flashgate.conf (rendered, temporary prefix)"
	else
		fail "nginx -t:"
		cat "$tmp/nginx-t.log"
		return
	fi
	check_nginx_debian "$here/nginx/flashgate.conf"
	nginx -p "$nd" -c "$nd/nginx.conf" -e "$nd/logs/error.log" -g 'daemon off;' >"$tmp/nginx.log" 2>&1 &
	started+=($!)
	local base=http://127.0.0.1:$np
	if ! await curl -sf "$base/healthz"; then
		fail "nginx did not start:"
		cat "$tmp/nginx.log" "$nd/logs/error.log" 2>/dev/null || true
		return
	fi
	pass "nginx serves on $base in front of two stub gateways"

	# upstream_count METHOD PATH: how often the stub gateway saw it.
	upstream_count() {
		curl -s "http://127.0.0.1:$gw/__count/$1_$2"
	}
	# field JSON NAME: the stub's flat JSON, "name": "text" or "name": 123.
	field() { sed -n 's/.*"'"$2"'": \("\([^"]*\)"\|\([0-9][0-9]*\)\).*/\2\3/p' <<<"$1"; }

	# The micro-cache: a second GET within the second is a HIT and never
	# reaches the gateway. Tried a few times in case the machine is so slow
	# that a whole second passes between two requests.
	local path ok h1 h2
	for path in /api/sales/demo /sales/demo; do
		ok=0
		for _ in 1 2 3 4 5; do
			h1=$(curl -s -o /dev/null -D - "$base$path" | tr -d '\r' | grep -i '^x-cache-status' || true)
			h2=$(curl -s -o /dev/null -D - "$base$path" | tr -d '\r' | grep -i '^x-cache-status' || true)
			if grep -qi 'HIT' <<<"$h2"; then
				ok=1
				break
			fi
		done
		if [ "$ok" = 1 ]; then
			pass "GET $path is micro-cached ($h1, then $h2)"
		else
			fail "GET $path: second answer $h2, want X-Cache-Status: HIT"
		fi
	done
	local before after
	before=$(upstream_count GET /api/sales/demo)
	for _ in 1 2 3 4 5 6 7 8 9 10; do curl -s -o /dev/null "$base/api/sales/demo"; done
	after=$(upstream_count GET /api/sales/demo)
	if [ $((after - before)) -le 10 ] && [ "$after" -ge 1 ]; then
		pass "10 GETs of /api/sales/demo reached the gateway $((after - before)) times"
	else
		fail "GET /api/sales/demo: gateway counts $before -> $after"
	fi

	# Accept-Encoding is folded to gzip or nothing.
	local body
	body=$(curl -s -H 'Accept-Encoding: gzip, deflate, br' "$base/api/orders/ae1")
	if [ "$(field "$body" ae)" = gzip ]; then pass "Accept-Encoding 'gzip, deflate, br' reaches the gateway as 'gzip'"; else fail "Accept-Encoding: got '$(field "$body" ae)', want gzip"; fi
	body=$(curl -s -H 'Accept-Encoding: br' "$base/api/orders/ae2")
	if [ -z "$(field "$body" ae)" ]; then pass "Accept-Encoding 'br' reaches the gateway empty"; else fail "Accept-Encoding: got '$(field "$body" ae)', want empty"; fi

	# Purchases and orders: never cached, Authorization passed.
	local b1 b2 hdr
	b1=$(curl -s -X POST -H 'Authorization: Bearer tok-1' -d '{"quantity":1}' "$base/api/sales/demo/orders")
	b2=$(curl -s -X POST -H 'Authorization: Bearer tok-1' -d '{"quantity":1}' "$base/api/sales/demo/orders")
	if [ "$(field "$b1" n)" = 1 ] && [ "$(field "$b2" n)" = 2 ]; then pass "each purchase POST reaches the gateway"; else fail "purchase POSTs: got $b1 then $b2"; fi
	if [ "$(field "$b1" auth)" = "Bearer tok-1" ]; then pass "Authorization reaches the gateway"; else fail "Authorization: got '$(field "$b1" auth)', want 'Bearer tok-1'"; fi
	hdr=$(curl -s -o /dev/null -D - -X POST "$base/api/sales/demo/orders" | tr -d '\r')
	if grep -qi '^x-cache-status' <<<"$hdr"; then fail "purchase answer went through the cache: $hdr"; else pass "purchase answers bypass the cache"; fi
	b1=$(curl -s -H 'Authorization: Bearer tok-1' "$base/api/orders/o1")
	b2=$(curl -s -H 'Authorization: Bearer tok-2' "$base/api/orders/o1")
	if [ "$(field "$b1" n)" = 1 ] && [ "$(field "$b2" n)" = 2 ] && [ "$(field "$b2" auth)" = "Bearer tok-2" ]; then
		pass "GET /api/orders/{id} is never cached"
	else
		fail "GET /api/orders/o1: got $b1 then $b2"
	fi

	# The admin API and metrics are not public.
	local code
	for path in /admin/ /admin/sales /admin/sales/demo/start /metrics /debug/pprof/; do
		code=$(curl -s -o /dev/null -w '%{http_code}' "$base$path")
		if [ "$code" = 404 ] && [ "$(upstream_count GET "$path")" = 0 ]; then
			pass "GET $path is refused (404) without reaching a gateway"
		else
			fail "GET $path: got $code, gateway saw it $(upstream_count GET "$path") times; want 404 and 0"
		fi
	done

	# Routing: one buyer (token) always reaches the same gateway; many buyers
	# and requests without a token reach both.
	local i gws tok
	tok="Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyb3V0ZSJ9.c2lnbmF0dXJlLW9mLXJvdXRl"
	gws=$(for i in $(seq 1 20); do field "$(curl -s -H "Authorization: $tok" "$base/api/orders/r$i")" gw; done | sort -u | tr '\n' ' ')
	if [ "$(wc -w <<<"$gws")" = 1 ]; then pass "20 requests of one buyer reach one gateway ($gws)"; else fail "one buyer reached gateways $gws; want one"; fi
	gws=$(for i in $(seq 1 40); do field "$(curl -s -H "Authorization: Bearer h.p.buyer-sig-$i" "$base/api/orders/m$i")" gw; done | sort -u | tr '\n' ' ')
	if [ "$(wc -w <<<"$gws")" = 2 ]; then pass "40 buyers reach both gateways ($gws)"; else fail "40 buyers reached gateways $gws; want both"; fi
	gws=$(for i in $(seq 1 40); do field "$(curl -s "$base/api/orders/anon$i")" gw; done | sort -u | tr '\n' ' ')
	if [ "$(wc -w <<<"$gws")" = 2 ]; then pass "40 requests without a token reach both gateways ($gws)"; else fail "requests without a token reached gateways $gws; want both"; fi

	# The per-buyer purchase limit (2/s, burst 5): 50 quick POSTs with one
	# token get 429s, in the API's JSON shape. Only a machine so slow that the
	# run took longer than the limit lets through is excused.
	local urls=() codes t0 t1
	for _ in $(seq 1 50); do urls+=(-o /dev/null "$base/api/sales/flood/orders"); done
	t0=$(date +%s%N)
	codes=$(curl -s --no-progress-meter -X POST -H "Authorization: $tok" --parallel --parallel-max 8 -w '%{http_code}\n' "${urls[@]}" | sort | uniq -c | tr -s ' \n' ' ')
	t1=$(date +%s%N)
	if grep -q ' 429' <<<"$codes"; then
		pass "50 quick purchase POSTs of one buyer:$codes"
	elif [ $(((t1 - t0) / 1000000)) -gt 20000 ]; then
		skip "purchase limit: 50 POSTs took $(((t1 - t0) / 1000000)) ms, too slow to reach 2/s + 5"
	else
		fail "no 429 among 50 quick purchase POSTs of one buyer:$codes"
	fi
	# Ten more at once, while the buyer's bucket is still over its burst.
	local ten=()
	for _ in $(seq 1 10); do ten+=("$base/api/sales/flood/orders"); done
	hdr=$(curl -s -D - -w '\n' -X POST -H "Authorization: $tok" "${ten[@]}" | tr -d '\r' | grep -A 20 '^HTTP/1.1 429' | sed '/^{/q' || true)
	if grep -q '^HTTP/1.1 429' <<<"$hdr"; then
		if grep -qi '^retry-after: ' <<<"$hdr" && grep -q '^{"error":"rate_limited"}' <<<"$hdr"; then
			pass "429 carries Retry-After and {\"error\":\"rate_limited\"}"
		else
			fail "429 answer: $hdr"
		fi
	else
		skip "429 shape (the limiter had refilled by the time of the check)"
	fi
	# 300 buyers from this one address, one purchase each: none refused.
	codes=$(python3 - "$base/api/sales/many/orders" <<'EOF'
import collections, concurrent.futures, sys, urllib.error, urllib.request
def buy(i):
    r = urllib.request.Request(sys.argv[1], data=b"", method="POST",
                               headers={"Authorization": "Bearer h.p.many-%d" % i})
    try:
        return urllib.request.urlopen(r, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
with concurrent.futures.ThreadPoolExecutor(16) as ex:
    c = collections.Counter(ex.map(buy, range(300)))
print(" ".join("%d x %d" % (n, code) for code, n in sorted(c.items())))
EOF
)
	if grep -q ' 429' <<<"$codes"; then fail "300 buyers from one address got 429s: $codes"; else pass "300 buyers from one address, one purchase each: $codes"; fi

	# Tokens in item-page URLs reach neither the access log nor the cache:
	# two buyers' links to one page share one cache entry (the second is a
	# HIT), and neither token is in the log or in any cache file.
	local jwt1 jwt2 log=$nd/logs/access.log
	jwt1="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJsb2ctb25lIn0.c2lnLW9mLWxvZy1vbmUtdG9rZW4tMTExMTExMTExMTE"
	jwt2="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJsb2ctdHdvIn0.c2lnLW9mLWxvZy10d28tdG9rZW4tMjIyMjIyMjIyMjI"
	ok=0
	for _ in 1 2 3 4 5; do
		h1=$(curl -s -o /dev/null -D - "$base/sales/tokpage?token=$jwt1" | tr -d '\r' | grep -i '^x-cache-status' || true)
		h2=$(curl -s -o /dev/null -D - "$base/sales/tokpage?token=$jwt2" | tr -d '\r' | grep -i '^x-cache-status' || true)
		if grep -qi 'HIT' <<<"$h2"; then
			ok=1
			break
		fi
	done
	if [ "$ok" = 1 ]; then
		pass "two buyers' links to /sales/tokpage?token=… share one cache entry ($h1, then $h2)"
	else
		fail "/sales/tokpage with another token: $h2, want X-Cache-Status: HIT (the token must not be in the cache key)"
	fi
	curl -s -o /dev/null "$base/sales/tokpage?utm=mail&token=$jwt1&lang=de"
	curl -s -o /dev/null "$base/sales/tokpage?token=$jwt1&Token=$jwt2"
	curl -s -o /dev/null "$base/api/orders/o7?ref=$jwt2"
	if await grep -q 'GET /sales/tokpage?utm=mail&lang=de HTTP' "$log" &&
		await grep -q 'GET /api/orders/o7?\[redacted\] HTTP' "$log"; then
		pass "the access log keeps the path and the query without the token: $(grep -m1 -o '"GET /sales/tokpage?utm[^"]*"' "$log")"
	else
		fail "the access log lacks 'GET /sales/tokpage?utm=mail&lang=de' or '/api/orders/o7?[redacted]':"
		tail -n 5 "$log"
	fi
	# The cache files' keys (their "KEY:" header line; the bodies are the
	# stub's, which echoes the URL it was sent, unlike a gateway's page).
	local leaks keys
	keys=$(grep -rah '^KEY: ' "$nd/cache" 2>/dev/null | sort -u || true)
	leaks=$(grep -rlE "${jwt1##*.}|${jwt2##*.}|eyJ" "$nd/logs" 2>/dev/null || true)
	if grep -qE "${jwt1##*.}|${jwt2##*.}|eyJ" <<<"$keys"; then leaks+=" cache keys"; fi
	if [ -z "$leaks" ] && [ -s "$log" ] && grep -q 'tokpage' <<<"$keys"; then
		pass "no token in the access log ($(wc -l <"$log") lines) or the cache keys ($(grep -c . <<<"$keys"), e.g. $(grep -m1 tokpage <<<"$keys"))"
	else
		fail "tokens found in: ${leaks:-an empty access log or no cache key for tokpage}"
		grep -h 'tokpage\|o7' "$log" | tail -n 5
	fi

	# A dead gateway: nginx answers 503 in the API's JSON for what it cannot
	# serve from the cache.
	kill -TERM "$stub" 2>/dev/null || true  # both stub gateways
	wait "$stub" 2>/dev/null || true
	hdr=$(curl -s -D - "$base/api/orders/o9" | tr -d '\r')
	if grep -q '^HTTP/1.1 503' <<<"$hdr" && grep -q '^{"error":"unavailable"}' <<<"$hdr"; then
		pass "no gateway: 503 {\"error\":\"unavailable\"}"
	else
		fail "no gateway: got $hdr"
	fi
}

# check_nginx_debian CONF follows deploy/README.md's steps for Debian's
# stock nginx (package nginx: /etc/nginx/nginx.conf includes conf.d/*.conf
# and sites-enabled/*) on a copy of this machine's /etc/nginx, then runs
# nginx -t on it: CONF into conf.d/, the default site out of sites-enabled,
# worker_rlimit_nofile and worker_connections raised in nginx.conf. Every
# path nginx writes (/var/log/nginx, /var/cache) points into the copy,
# which holds only the directories that exist on this machine, so that a
# directory Debian does not create (/var/cache/nginx) fails here as it
# would in production. Debian's compiled-in temporary paths under
# /var/lib/nginx are nginx's own and created by nginx -t as root.
check_nginx_debian() {
	local conf=$1 root=$tmp/debian
	if [ ! -f /etc/nginx/nginx.conf ] || ! grep -q 'include /etc/nginx/conf.d/\*.conf' /etc/nginx/nginx.conf; then
		skip "nginx -t on Debian's stock layout (no stock /etc/nginx/nginx.conf here)"
		return
	fi
	if [ "$(id -u)" != 0 ]; then
		skip "nginx -t on Debian's stock layout (needs root, as Debian's nginx does)"
		return
	fi
	mkdir -p "$root/etc"
	cp -a /etc/nginx "$root/etc/nginx"
	local d
	for d in /var/log/nginx /var/cache /run; do
		if [ -d "$d" ]; then mkdir -p "$root$d"; fi
	done
	# The README's steps.
	cp "$conf" "$root/etc/nginx/conf.d/flashgate.conf"
	rm -f "$root/etc/nginx/sites-enabled/default"
	sed -i 's/^worker_processes .*/&\nworker_rlimit_nofile 200000;/; s/^\([[:space:]]*\)worker_connections .*;/\1worker_connections 65535;/' "$root/etc/nginx/nginx.conf"
	# Into the copy: every path under /etc/nginx, /var/log/nginx, /var/cache, /run.
	grep -rlE '/etc/nginx|/var/log/nginx|/var/cache|/run/' "$root/etc/nginx" | while read -r f; do
		sed -i "s|/etc/nginx|$root/etc/nginx|g; s|/var/log/nginx|$root/var/log/nginx|g; s|/var/cache/|$root/var/cache/|g; s|/run/|$root/run/|g" "$f"
	done
	if nginx -t -c "$root/etc/nginx/nginx.conf" -e "$root/var/log/nginx/error.log" >"$tmp/nginx-debian.log" 2>&1; then
		pass "nginx -t on Debian's stock layout with nginx/flashgate.conf in conf.d, as deploy/README.md says ($(nginx -v 2>&1))"
	else
		fail "nginx -t on Debian's stock layout with nginx/flashgate.conf in conf.d:"
		sed "s|$root||g" "$tmp/nginx-debian.log"
	fi
	if [ -d "$root/var/log/nginx" ] && grep -q 'access_log /var/log/nginx/flashgate.log flashgate;' "$conf"; then
		if [ -e "$root/var/log/nginx/flashgate.log" ]; then pass "the flashgate server logs to /var/log/nginx/flashgate.log"; else fail "nginx -t did not open /var/log/nginx/flashgate.log"; fi
	fi
}

# check_alert_tests DIR: every alert of DIR/*.rules.yaml is evaluated by a
# test of DIR/*.test.yaml, once where it must fire (exp_alerts not empty).
check_alert_tests() {
	if python3 - "$1" <<'EOF'; then
import glob, os, sys, yaml
d = sys.argv[1]
alerts = [r["alert"] for f in glob.glob(os.path.join(d, "*.rules.yaml"))
          for g in yaml.safe_load(open(f))["groups"] for r in g["rules"] if "alert" in r]
fired = set()
for f in glob.glob(os.path.join(d, "*.test.yaml")):
    for t in yaml.safe_load(open(f))["tests"]:
        for a in t.get("alert_rule_test", []):
            if a.get("exp_alerts"):
                fired.add(a["alertname"])
missing = [a for a in alerts if a not in fired]
if missing:
    print("FAIL alerts no test sees fire: " + ", ".join(missing))
    sys.exit(1)
print("PASS every alert (%d) has a test in which it fires" % len(alerts))
EOF
		:
	else
		fail "alert rule tests"
	fi
}

# check_scrape_config DIR checks DIR/prometheus.yml with promtool and with a
# real Prometheus. Debian's prometheus is built without Kubernetes service
# discovery, so a copy whose kubernetes_sd_configs block is replaced by a
# file of the targets Kubernetes would list (a gateway pod's two ports, an
# order sink's admin port, a Redis pod; with the __meta_kubernetes_* labels
# the pod role gives) runs on loopback: its targets must be one per
# flashgate pod, on the metrics port, with the pod, namespace, tier and job
# labels the rules rely on, and the rules must load.
check_scrape_config() {
	local prom=$1 cfg=$tmp/prom/prometheus.yml
	mkdir -p "$tmp/prom"
	if ! python3 - "$prom/prometheus.yml" "$cfg" <<'EOF'; then
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
jobs = [j for j in c["scrape_configs"] if "kubernetes_sd_configs" in j]
if len(jobs) != 1:
    sys.exit("prometheus.yml: want one job with kubernetes_sd_configs")
del jobs[0]["kubernetes_sd_configs"]
jobs[0]["file_sd_configs"] = [{"files": ["targets.json"]}]
yaml.safe_dump(c, open(sys.argv[2], "w"))
EOF
		fail "prometheus.yml: no job with Kubernetes discovery to stand in for"
		return
	fi
	cp "$prom"/*.rules.yaml "$tmp/prom/"
	local mp ap pp
	mp=$(free_port)
	ap=$(free_port)
	pp=$(free_port)
	python3 - "$tmp/prom/targets.json" "$mp" "$ap" <<'EOF'
import json, sys
out, mp, ap = sys.argv[1:4]
def pod(name, labels, port, port_name, ann=True):
    l = {"__meta_kubernetes_namespace": "flashgate", "__meta_kubernetes_pod_name": name,
         "__meta_kubernetes_pod_container_port_name": port_name}
    for k, v in labels.items():
        l["__meta_kubernetes_pod_label_" + k.replace(".", "_").replace("/", "_")] = v
    if ann:
        l.update({"__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
                  "__meta_kubernetes_pod_annotation_prometheus_io_port": str(port),
                  "__meta_kubernetes_pod_annotation_prometheus_io_path": "/metrics"})
    return {"targets": ["127.0.0.1:%s" % port], "labels": l}
fg = lambda c: {"app.kubernetes.io/name": "flashgate", "app.kubernetes.io/component": c}
json.dump([
    pod("gateway-7d9f-abcde", fg("gateway"), mp, "metrics"),
    pod("gateway-7d9f-abcde", fg("gateway"), 8080, "http"),
    pod("ordersink-0", fg("ordersink"), ap, "admin"),
    pod("redis-primary-0", {"app.kubernetes.io/name": "redis"}, 6379, "redis", ann=False),
], open(out, "w"))
EOF
	if promtool check config "$cfg" >"$tmp/promtool.log" 2>&1; then
		pass "promtool check config prometheus/prometheus.yml (Kubernetes discovery stood in for by a file)"
	else
		fail "promtool check config prometheus/prometheus.yml:"
		cat "$tmp/promtool.log"
		return
	fi
	if ! command -v prometheus >/dev/null 2>&1; then
		missing "prometheus" "Debian: apt-get install prometheus"
		return
	fi
	(cd "$tmp/prom" && exec prometheus --config.file=prometheus.yml --web.listen-address="127.0.0.1:$pp" \
		--storage.tsdb.path="$tmp/prom/data" >"$tmp/prom/log" 2>&1) &
	started+=($!)
	local api=http://127.0.0.1:$pp/api/v1
	if ! await sh -c "curl -sf '$api/targets' | grep -q ordersink-0"; then
		fail "prometheus with prometheus.yml did not list its targets:"
		tail -n 20 "$tmp/prom/log"
		return
	fi
	if python3 - "$api" "$mp" "$ap" <<'EOF'; then
import json, sys, urllib.request
api, mp, ap = sys.argv[1:4]
t = json.load(urllib.request.urlopen(api + "/targets"))["data"]["activeTargets"]
got = sorted((x["labels"].get("pod"), x["labels"].get("tier"), x["labels"].get("namespace"),
              x["labels"].get("job"), x["scrapeUrl"]) for x in t)
want = sorted([("gateway-7d9f-abcde", "gateway", "flashgate", "flashgate", "http://127.0.0.1:%s/metrics" % mp),
               ("ordersink-0", "ordersink", "flashgate", "flashgate", "http://127.0.0.1:%s/metrics" % ap)])
if got != want:
    print("FAIL prometheus.yml targets (pod, tier, namespace, job, url): got %s, want %s" % (got, want))
    sys.exit(1)
g = json.load(urllib.request.urlopen(api + "/rules"))["data"]["groups"]
rules = [r for x in g for r in x["rules"]]
bad = [r["name"] for r in rules if r.get("health") not in ("ok", "unknown")]
if not rules or bad:
    print("FAIL prometheus loaded %d rules, unhealthy: %s" % (len(rules), bad))
    sys.exit(1)
print("PASS prometheus.yml in a real Prometheus: one target per flashgate pod, on its metrics port, labelled %s; %d rules loaded"
      % (", ".join("%s=%s" % kv for kv in zip(("pod", "tier", "namespace", "job"), got[0][:4])), len(rules)))
EOF
		:
	else
		fail "prometheus.yml's targets or rules in a real Prometheus"
	fi
}

check_monitoring() {
	local prom=$here/prometheus graf=$here/grafana
	if command -v promtool >/dev/null 2>&1; then
		local f
		for f in "$prom"/*.rules.yaml; do
			if promtool check rules "$f" >"$tmp/promtool.log" 2>&1; then
				pass "promtool check rules ${f#"$here"/}: $(grep -o '[0-9]* rules found' "$tmp/promtool.log")"
			else
				fail "promtool check rules ${f#"$here"/}:"
				cat "$tmp/promtool.log"
			fi
		done
		for f in "$prom"/*.test.yaml; do
			if (cd "$prom" && promtool test rules "$(basename "$f")") >"$tmp/promtool.log" 2>&1; then
				pass "promtool test rules ${f#"$here"/}"
			else
				fail "promtool test rules ${f#"$here"/}:"
				cat "$tmp/promtool.log"
			fi
		done
		check_alert_tests "$prom"
		check_scrape_config "$prom"
	elif [ -n "${CI:-}" ]; then
		fail "monitoring: promtool not installed (Debian: apt-get install prometheus); CI must install it"
	else
		skip "promtool check/test rules (promtool not installed; Debian: apt-get install prometheus)"
	fi
	if ! command -v python3 >/dev/null 2>&1; then
		skip "grafana dashboard and metric names (python3 not installed)"
		return
	fi
	if python3 - "$here/.." "$graf" "$prom" "$tmp/dashboard-queries.yaml" <<'EOF'; then
import glob, json, os, re, sys
root, graf, prom, out = sys.argv[1:5]
bad = 0
def fail(msg):
    global bad
    bad += 1
    print("FAIL " + msg)
# The metric names the code defines: every "flashgate_..." string literal in
# a Go file that is not a test.
defined = set()
for dirpath, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("bin", "deploy")]
    for f in files:
        if f.endswith(".go") and not f.endswith("_test.go"):
            defined |= set(re.findall(r'"(flashgate_[a-z0-9_]+)"', open(os.path.join(dirpath, f)).read()))
if not defined:
    fail("no flashgate_* metric names found in the Go code under " + root)
def known(name):
    if name in defined:
        return True
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in defined:
            return True
    return False
def check_names(where, expr):
    for name in re.findall(r"\bflashgate_[a-z0-9_]+", expr):
        if not known(name):
            fail("%s: metric %s is not defined in the code" % (where, name))
exprs = []
for f in sorted(glob.glob(os.path.join(graf, "*.json"))):
    name = os.path.basename(f)
    try:
        d = json.load(open(f))
    except ValueError as e:
        fail("%s: not JSON: %s" % (name, e))
        continue
    if not d.get("title") or not d.get("uid"):
        fail("%s: no title or uid" % name)
    ids = [p.get("id") for p in d.get("panels", [])]
    if len(ids) != len(set(ids)) or None in ids:
        fail("%s: panel ids missing or repeated" % name)
    n = 0
    for p in d.get("panels", []):
        if p.get("type") == "row":
            continue
        if not p.get("targets"):
            fail("%s: panel %r queries nothing" % (name, p.get("title")))
        for t in p.get("targets", []):
            e = t.get("expr", "")
            if not e:
                fail("%s: panel %r has a target without expr" % (name, p.get("title")))
                continue
            check_names("%s panel %r" % (name, p.get("title")), e)
            # Grafana's variables, as PromQL promtool can parse.
            exprs.append(re.sub(r"\$\{?[A-Za-z_]+\}?", ".*", e))
            n += 1
    print("PASS %s: %d panels, %d queries, every metric defined in the code" % (name, len(ids), n))
# The alert rules name only defined metrics too.
for f in sorted(glob.glob(os.path.join(prom, "*.rules.yaml"))):
    check_names(os.path.basename(f), "\n".join(l for l in open(f) if not l.lstrip().startswith("#")))
# The dashboard's queries as recording rules, for promtool to parse.
with open(out, "w") as w:
    w.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        w.write("      - record: dashboard:query_%d\n        expr: %s\n" % (i, json.dumps(e)))
sys.exit(1 if bad else 0)
EOF
		pass "grafana dashboard and alert rules name only metrics the code defines"
	else
		fail "grafana dashboard or alert rules"
	fi
	if command -v promtool >/dev/null 2>&1 && [ -s "$tmp/dashboard-queries.yaml" ]; then
		if promtool check rules "$tmp/dashboard-queries.yaml" >"$tmp/promtool.log" 2>&1; then
			pass "every dashboard query is valid PromQL (promtool)"
		else
			fail "dashboard queries:"
			cat "$tmp/promtool.log"
		fi
	fi
}

check_k8s() {
	if ! python3 -c 'import yaml' >/dev/null 2>&1; then
		skip "k8s (python3 with the yaml module not installed)"
		return
	fi
	if python3 - "$here/k8s" <<'EOF'; then
import os, sys, yaml
root = sys.argv[1]
bad = 0
def fail(msg):
    global bad
    bad += 1
    print("FAIL " + msg)
files = sorted(f for f in os.listdir(root) if f.endswith((".yaml", ".yml")))
for f in files:
    try:
        docs = [d for d in yaml.safe_load_all(open(os.path.join(root, f))) if d is not None]
    except yaml.YAMLError as e:
        fail("%s: %s" % (f, e))
        continue
    for d in docs:
        if f == "kustomization.yaml":
            continue
        if not isinstance(d, dict) or not d.get("kind") or not d.get("apiVersion") or not d.get("metadata", {}).get("name"):
            fail("%s: a document without apiVersion, kind or metadata.name" % f)
        if d.get("kind") == "Secret":
            for k, v in (d.get("stringData") or {}).items():
                if "CHANGE_ME" not in str(v):
                    fail("%s: Secret key %s holds a value, not a CHANGE_ME placeholder" % (f, k))
            if d.get("data"):
                fail("%s: Secret template has data; only stringData placeholders belong here" % f)
        if d.get("kind") in ("Deployment", "StatefulSet") and any(
                "flashgate" in c.get("image", "") for c in d["spec"]["template"]["spec"].get("containers", [])):
            tmpl = d["spec"]["template"]
            ann = tmpl.get("metadata", {}).get("annotations") or {}
            ports = {str(p.get("containerPort")) for c in tmpl["spec"]["containers"] for p in c.get("ports", [])}
            name = d["metadata"]["name"]
            if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics":
                fail("%s: %s pods lack prometheus.io/scrape: \"true\" and prometheus.io/path: /metrics" % (f, name))
            elif ann.get("prometheus.io/port") not in ports:
                fail("%s: %s pods' prometheus.io/port %r is not a container port %s" % (f, name, ann.get("prometheus.io/port"), sorted(ports)))
            else:
                print("PASS %s: %s pods are scraped on :%s/metrics" % (f, name, ann["prometheus.io/port"]))
    print("PASS %s parses (%d documents)" % (f, len(docs)))
for base in (root, os.path.dirname(root)):
    k = yaml.safe_load(open(os.path.join(base, "kustomization.yaml")))
    for r in k.get("resources", []):
        if not os.path.exists(os.path.join(base, r)):
            fail("%s/kustomization.yaml lists %s, which does not exist" % (base, r))
        elif "secret" in r:
            fail("kustomization.yaml applies %s: the Secret template must never be applied over a real secret" % r)
    for g in k.get("configMapGenerator", []):
        for fl in g.get("files", []):
            p = fl.split("=", 1)[-1]
            if not os.path.exists(os.path.join(base, p)):
                fail("configMapGenerator file %s does not exist" % p)
# The edge examples (deploy/k8s/edge, not in the kustomization) carry the
# limits and routing of nginx/flashgate.conf.
edge = os.path.join(root, "edge")
objs = {}
for f in sorted(os.listdir(edge)):
    if not f.endswith(".yaml"):
        continue
    try:
        docs = [d for d in yaml.safe_load_all(open(os.path.join(edge, f))) if d is not None]
    except yaml.YAMLError as e:
        fail("edge/%s: %s" % (f, e))
        continue
    for d in docs:
        if not isinstance(d, dict) or not d.get("kind") or not d.get("apiVersion") or not d.get("metadata", {}).get("name"):
            fail("edge/%s: a document without apiVersion, kind or metadata.name" % f)
            continue
        objs[(d["kind"], d["metadata"]["name"])] = d
    print("PASS edge/%s parses (%d documents)" % (f, len(docs)))
def want(cond, msg):
    if cond:
        print("PASS edge: " + msg)
    else:
        fail("edge: " + msg)
ing = objs.get(("Ingress", "flashgate-buyer"), {}).get("metadata", {}).get("annotations", {})
want(ing.get("nginx.ingress.kubernetes.io/upstream-hash-by") == "$http_authorization",
     "Ingress flashgate-buyer hashes on the Authorization header")
want(ing.get("nginx.ingress.kubernetes.io/limit-rps") == "2000",
     "Ingress flashgate-buyer caps an address at 2000 r/s, as flashgate.conf")
btp = objs.get(("BackendTrafficPolicy", "flashgate-purchase"), {}).get("spec", {})
ch = btp.get("loadBalancer", {}).get("consistentHash", {})
want(ch.get("type") == "Header" and ch.get("header", {}).get("name") == "Authorization",
     "BackendTrafficPolicy flashgate-purchase hashes on the Authorization header")
rules = btp.get("rateLimit", {}).get("global", {}).get("rules", [])
per_buyer = [r for r in rules if any(h.get("name") == "Authorization" and h.get("type") == "Distinct"
             for c in r.get("clientSelectors", []) for h in c.get("headers", []))]
want(len(per_buyer) == 1 and per_buyer[0]["limit"] == {"requests": 2, "unit": "Second"},
     "BackendTrafficPolicy flashgate-purchase limits each buyer (token) to 2/s")
# The optional Redis Cluster (redis-cluster.yaml, used instead of redis.yaml):
# six cluster-enabled nodes that keep serving healthy shards, and a Job that
# creates the cluster with one replica per primary.
rc = os.path.join(root, "redis-cluster.yaml")
if os.path.exists(rc):
    docs = [d for d in yaml.safe_load_all(open(rc)) if d]
    sts = [d for d in docs if d.get("kind") == "StatefulSet"]
    jobs = [d for d in docs if d.get("kind") == "Job"]
    node = " ".join(sts[0]["spec"]["template"]["spec"]["containers"][0].get("args", [])) if sts else ""
    create = " ".join(jobs[0]["spec"]["template"]["spec"]["containers"][0].get("args", [])) if jobs else ""
    if not sts or sts[0]["spec"].get("replicas", 0) != 6:
        fail("redis-cluster.yaml: want one StatefulSet of 6 nodes")
    for w in ("--cluster-enabled yes", "--cluster-require-full-coverage no", "--cluster-config-file /data/"):
        if w not in node:
            fail("redis-cluster.yaml: the nodes lack %s" % w)
    for w in ("--cluster create", "--cluster-replicas 1", "--cluster-yes"):
        if w not in create:
            fail("redis-cluster.yaml: the create Job lacks %s" % w)
    print("PASS redis-cluster.yaml: 6 cluster nodes, full coverage off, a create Job")
# The optional Sentinel set-up (redis-sentinel.yaml, used instead of
# redis.yaml): two data nodes on primary.conf that ask the Sentinels for
# the primary, three Sentinels on a writable copy of sentinel.conf.
rs = os.path.join(root, "redis-sentinel.yaml")
if os.path.exists(rs):
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(open(rs)) if d}
    data = docs.get(("StatefulSet", "redis"), {}).get("spec", {})
    sen = docs.get(("StatefulSet", "redis-sentinel"), {}).get("spec", {})
    dargs = " ".join(data.get("template", {}).get("spec", {}).get("containers", [{}])[0].get("args", []))
    sargs = " ".join(sen.get("template", {}).get("spec", {}).get("containers", [{}])[0].get("args", []))
    if data.get("replicas") != 2 or "cp /etc/redis/primary.conf /data/redis.conf" not in dargs or "get-master-addr-by-name flashgate" not in dargs:
        fail("redis-sentinel.yaml: want StatefulSet redis of 2 on primary.conf, asking the Sentinels for the primary")
    if sen.get("replicas") != 3 or "--sentinel" not in sargs or "sentinel monitor flashgate redis-0.redis 6379 2" not in sargs:
        fail("redis-sentinel.yaml: want StatefulSet redis-sentinel of 3 monitoring redis-0.redis with quorum 2")
    print("PASS redis-sentinel.yaml: 2 data nodes on primary.conf, 3 Sentinels, quorum 2")
sys.exit(1 if bad else 0)
EOF
		pass "k8s manifests parse"
	else
		fail "k8s manifests"
	fi
	check_netpol
	check_schemas
	if command -v kubectl >/dev/null 2>&1; then
		if kubectl kustomize "$here" >"$tmp/k8s.yaml" 2>"$tmp/k8s.err"; then
			pass "kubectl kustomize deploy ($(grep -c '^kind:' "$tmp/k8s.yaml") objects)"
			if grep -q '^kind: Secret' "$tmp/k8s.yaml"; then fail "the kustomization renders a Secret"; fi
			if grep -q 'name: redis-config$' "$tmp/k8s.yaml"; then fail "a reference to redis-config was not rewritten to the generated name"; fi
		else
			fail "kubectl kustomize deploy:"
			cat "$tmp/k8s.err"
		fi
		# The Redis Cluster variant: redis-cluster.yaml instead of redis.yaml.
		mkdir -p "$tmp/variant"
		cp -r "$here/k8s" "$here/redis" "$here/kustomization.yaml" "$tmp/variant/"
		sed -i 's/^  - redis\.yaml$/  - redis-cluster.yaml/' "$tmp/variant/k8s/kustomization.yaml"
		if kubectl kustomize "$tmp/variant" >"$tmp/k8s-cluster.yaml" 2>"$tmp/k8s.err"; then
			pass "kubectl kustomize with redis-cluster.yaml ($(grep -c '^kind:' "$tmp/k8s-cluster.yaml") objects)"
		else
			fail "kubectl kustomize with redis-cluster.yaml:"
			cat "$tmp/k8s.err"
		fi
		# The Sentinel variant: redis-sentinel.yaml instead of redis.yaml.
		mkdir -p "$tmp/variant-sentinel"
		cp -r "$here/k8s" "$here/redis" "$here/kustomization.yaml" "$tmp/variant-sentinel/"
		sed -i 's/^  - redis\.yaml$/  - redis-sentinel.yaml/' "$tmp/variant-sentinel/k8s/kustomization.yaml"
		if kubectl kustomize "$tmp/variant-sentinel" >"$tmp/k8s-sentinel.yaml" 2>"$tmp/k8s.err" &&
			grep -q 'sentinel.conf:' "$tmp/k8s-sentinel.yaml" && ! grep -q 'name: redis-config$' "$tmp/k8s-sentinel.yaml"; then
			pass "kubectl kustomize with redis-sentinel.yaml ($(grep -c '^kind:' "$tmp/k8s-sentinel.yaml") objects, sentinel.conf in redis-config)"
		else
			fail "kubectl kustomize with redis-sentinel.yaml:"
			cat "$tmp/k8s.err"
		fi
	else
		skip "kubectl kustomize (kubectl not installed)"
	fi
}

# tool NAME: the path of a Go tool, from PATH or where go install puts it.
tool() {
	if command -v "$1" >/dev/null 2>&1; then
		command -v "$1"
	elif [ -x "$(go env GOPATH 2>/dev/null)/bin/$1" ]; then
		echo "$(go env GOPATH)/bin/$1"
	else
		return 1
	fi
}

# missing WHAT HOW: SKIP, or FAIL under CI, which must install everything.
missing() {
	if [ -n "${CI:-}" ]; then fail "$1 not installed ($2); CI must install it"; else skip "$1 not installed ($2)"; fi
}

# check_netpol evaluates every flow of k8s/check/flows.yaml, allowed and
# refused, against k8s/networkpolicy.yaml with a NetworkPolicy analyzer
# (cyclonus), and makes sure the same evaluation refuses the policy of
# issue 20 (k8s/check/networkpolicy-issue20.yaml: no way in to the
# gateways), so that the check is known to catch a policy that cuts buyers
# off.
check_netpol() {
	local cyc
	if ! cyc=$(tool cyclonus); then
		missing "cyclonus" "go install github.com/mattfenwick/cyclonus/cmd/cyclonus@v0.5.6"
		return
	fi
	if CYCLONUS=$cyc python3 "$here/k8s/check/netpol.py" "$here/k8s/networkpolicy.yaml" "$here/k8s/check/flows.yaml" >"$tmp/netpol.log" 2>&1; then
		grep '^PASS' "$tmp/netpol.log"
		pass "NetworkPolicies (cyclonus): $(tail -n 1 "$tmp/netpol.log")"
	else
		grep -v '^PASS' "$tmp/netpol.log"
		fail "NetworkPolicies: an intended flow is refused or a refused one allowed"
	fi
	local rc=0
	CYCLONUS=$cyc python3 "$here/k8s/check/netpol.py" "$here/k8s/check/networkpolicy-issue20.yaml" "$here/k8s/check/flows.yaml" >"$tmp/netpol-old.log" 2>&1 || rc=$?
	if [ "$rc" = 1 ] && grep -q '^FAIL netpol ingress-nginx -> gateway:8080 refused' "$tmp/netpol-old.log"; then
		pass "the flow check catches the policy of issue 20 ($(tail -n 1 "$tmp/netpol-old.log"))"
	else
		fail "the flow check does not catch the policy of issue 20 (rc=$rc):"
		cat "$tmp/netpol-old.log"
	fi
}

# check_schemas validates every manifest (and, with kubectl, the rendered
# kustomization) strictly against the Kubernetes 1.32 API: k8s/check/schema
# decodes each object into its k8s.io/api type refusing unknown, duplicate
# and mistyped fields, and checks it against the schema client-go v0.32
# generates from the 1.32 OpenAPI description. The Gateway API and Envoy
# Gateway objects (custom resources) are listed as skipped. A manifest with
# a misspelt field must fail, so that the check is known to look.
check_schemas() {
	if ! command -v go >/dev/null 2>&1; then
		missing "go" "the schema check is a Go program"
		return
	fi
	if ! (cd "$here/k8s/check/schema" && go build -o "$tmp/k8s-schema" .) >"$tmp/schema-build.log" 2>&1; then
		fail "building k8s/check/schema:"
		cat "$tmp/schema-build.log"
		return
	fi
	local files=() f
	for f in "$here"/k8s/*.yaml "$here"/k8s/edge/*.yaml; do
		[ "$(basename "$f")" = kustomization.yaml ] || files+=("$f")
	done
	if command -v kubectl >/dev/null 2>&1 && kubectl kustomize "$here" >"$tmp/rendered.yaml" 2>/dev/null; then
		files+=("$tmp/rendered.yaml")
	fi
	if "$tmp/k8s-schema" -crd gateway.networking.k8s.io -crd gateway.envoyproxy.io "${files[@]}" >"$tmp/schema.log" 2>&1; then
		sed "s|$here/||; s|$tmp/rendered.yaml|kubectl kustomize deploy|" "$tmp/schema.log"
		pass "every manifest is valid against the Kubernetes 1.32 API ($(grep -c '^PASS' "$tmp/schema.log") objects, $(grep -c '^SKIP' "$tmp/schema.log") custom resources skipped)"
	else
		grep -v '^PASS' "$tmp/schema.log"
		fail "manifests against the Kubernetes 1.32 API"
	fi
	sed 's/^  revisionHistoryLimit:/  revisionHistoryLimits:/' "$here/k8s/inventory.yaml" >"$tmp/misspelt.yaml"
	if ! "$tmp/k8s-schema" "$tmp/misspelt.yaml" >"$tmp/schema-bad.log" 2>&1 && grep -q 'unknown field "spec.revisionHistoryLimits"' "$tmp/schema-bad.log"; then
		pass "the schema check refuses a misspelt field (spec.revisionHistoryLimits)"
	else
		fail "the schema check accepted a misspelt field:"
		cat "$tmp/schema-bad.log"
	fi
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(shell redis nginx monitoring k8s)
for part in "${parts[@]}"; do
	case $part in
	shell) check_shell ;;
	redis) check_redis ;;
	nginx) check_nginx ;;
	monitoring) check_monitoring ;;
	k8s) check_k8s ;;
	*)
		echo "check.sh: unknown part $part (want shell, redis, nginx, monitoring or k8s)" >&2
		exit 2
		;;
	esac
done
if [ "$failures" -gt 0 ]; then
	echo "check.sh: $failures check(s) failed"
	exit 1
fi
echo "check.sh: all checks passed"

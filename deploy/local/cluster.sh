#!/usr/bin/env bash
# cluster.sh runs flashgate as a split deployment on this machine, every
# server on a free loopback port:
#
#   redis primary + 1 replica     (deploy/redis/*.conf, AOF on, data in the state dir)
#     or, with --redis-cluster, a Redis Cluster of 3 primaries + 3 replicas
#     or, with --redis-sentinel, a primary, a replica (both primary.conf) and
#     three Sentinels (deploy/redis/sentinel.conf, quorum 2); every tier then
#     finds the primary through them (--redis redis+sentinel://…/flashgate)
#   controlplane x1, ordersink x2, inventory x2, gateway x2   (bin/flashgate)
#   nginx in front of the gateways (deploy/nginx/flashgate.conf), if installed
#
# Usage:
#   deploy/local/cluster.sh up [--db URL] [--no-nginx] [--redis-cluster | --redis-sentinel]
#   deploy/local/cluster.sh status
#   deploy/local/cluster.sh down
#
# The database defaults to SQLite in the state dir; --db postgres://… uses a
# PostgreSQL server instead. The JWT secret and the admin token are generated
# at random by `up` and printed once; they are kept only in the environment of
# the processes, never in a file. The state dir (logs, pids, data) is
# $FLASHGATE_CLUSTER_DIR, default ${TMPDIR:-/tmp}/flashgate-cluster-<uid>;
# `up` starts from an empty one, `down` keeps it for reading the logs.
#
# deploy/local/cluster.sh nginx-config DIR HOST:PORT UPSTREAM... renders the
# nginx configuration alone (deploy/check.sh uses it).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${FLASHGATE_BIN:-$root/bin/flashgate}
state=${FLASHGATE_CLUSTER_DIR:-${TMPDIR:-/tmp}/flashgate-cluster-$(id -u)}
pids=$state/pids

die() {
	echo "cluster.sh: $*" >&2
	exit 1
}

usage() {
	sed -n '/^# Usage:/,/^# *$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# free_port sets port to a free loopback TCP port not handed out before in
# this run.
used_ports=" "
free_port() {
	local i p
	for i in $(seq 1 100); do
		if command -v python3 >/dev/null 2>&1; then
			p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		else
			p=$((20000 + RANDOM % 20000))
			if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
				continue # something listens there
			fi
		fi
		case $used_ports in *" $p "*) continue ;; esac
		used_ports+="$p "
		port=$p
		return 0
	done
	die "no free loopback port found after $i tries"
}

# random_secret prints 32 random bytes as hex.
random_secret() {
	if command -v openssl >/dev/null 2>&1; then
		openssl rand -hex 32
	else
		head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'
		echo
	fi
}

# launch NAME KIND CHECK CMD... starts CMD detached from this shell, logging
# to logs/NAME.log, and records "NAME PID KIND CHECK" in the pids file. KIND is
# the process's command name (checked before signalling a recorded pid);
# CHECK is what status probes: an http:// readiness URL or a redis:// URL.
launch() {
	local name=$1 kind=$2 check=$3
	shift 3
	setsid "$@" >"$state/logs/$name.log" 2>&1 </dev/null &
	echo "$name $! $kind $check" >>"$pids"
}

# alive PID KIND reports whether PID runs and is still a KIND (not a recycled
# pid belonging to something else).
alive() {
	local comm
	comm=$(ps -o comm= -p "$1" 2>/dev/null) || return 1
	# Right after launch the process may still be setsid, about to exec.
	[[ $comm == "$2"* || $comm == setsid ]]
}

# ready CHECK answers whether the server behind CHECK is ready.
ready() {
	case $1 in
	redis://*)
		local hp=${1#redis://}
		[ "$(redis-cli -h "${hp%:*}" -p "${hp##*:}" ping 2>/dev/null)" = PONG ]
		;;
	http://*)
		[ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null)" = 200 ]
		;;
	*) return 1 ;;
	esac
}

# wait_ready NAME waits (at most 30 s) until NAME, the last launched process of
# that name, is ready; it fails with the tail of its log if the process ends.
wait_ready() {
	local name=$1 line pid kind check i
	line=$(grep "^$name " "$pids" | tail -n 1)
	read -r _ pid kind check <<<"$line"
	for i in $(seq 1 300); do
		if ! alive "$pid" "$kind"; then
			echo "cluster.sh: $name (pid $pid) exited during start-up; last lines of $state/logs/$name.log:" >&2
			tail -n 20 "$state/logs/$name.log" >&2 || true
			return 1
		fi
		if ready "$check"; then
			return 0
		fi
		sleep 0.1
	done
	echo "cluster.sh: $name not ready after 30 s ($check); see $state/logs/$name.log" >&2
	return 1
}

# wait_replica HOST PORT waits (at most 30 s) until the replica's link to its
# primary is up.
wait_replica() {
	local i
	for i in $(seq 1 300); do
		if redis-cli -h "$1" -p "$2" info replication 2>/dev/null | grep -q '^master_link_status:up'; then
			return 0
		fi
		sleep 0.1
	done
	echo "cluster.sh: redis replica on $1:$2 did not sync with its primary in 30 s" >&2
	return 1
}

# nginx_config DIR LISTEN UPSTREAM... writes DIR/nginx.conf, a self-contained
# nginx configuration that includes deploy/nginx/flashgate.conf with its
# listener, upstream servers and cache directory replaced, and every path
# nginx writes kept under DIR.
nginx_config() {
	[ $# -ge 3 ] || die "nginx-config: want DIR HOST:PORT UPSTREAM..."
	local dir=$1 listen=$2 servers="" a
	shift 2
	for a in "$@"; do
		servers+="    server $a max_fails=3 fail_timeout=5s;\n"
	done
	mkdir -p "$dir/cache" "$dir/temp" "$dir/logs"
	dir=$(cd "$dir" && pwd)
	awk -v servers="$servers" -v listen="$listen" -v cache="$dir/cache" -v logs="$dir/logs" '
		/# BEGIN gateways/ { print; printf "%s", servers; skip = 1; next }
		/# END gateways/ { skip = 0 }
		skip { next }
		/^[ \t]*listen 80 / { if (sub(/listen 80 [^;]*;/, "listen " listen ";")) n++ }
		/^proxy_cache_path / { if (sub(/\/var\/cache\/nginx-flashgate/, cache)) n++ }
		/^[ \t]*access_log \/var\/log\/nginx\/flashgate.log / { if (sub(/\/var\/log\/nginx\/flashgate.log/, logs "/access.log")) n++ }
		{ print }
		END { if (n != 3) exit 3 }
	' "$here/../nginx/flashgate.conf" >"$dir/flashgate.conf" ||
		die "nginx-config: deploy/nginx/flashgate.conf no longer has the 'listen 80' line, the cache path or the access_log line this script rewrites"
	grep -q "server $1" "$dir/flashgate.conf" ||
		die "nginx-config: deploy/nginx/flashgate.conf lost its '# BEGIN gateways' / '# END gateways' markers"

	local user=""
	if [ "$(id -u)" = 0 ]; then
		# Workers run as nobody; they write the cache and temporary files.
		user="user nobody nogroup;"
		chown -R nobody:nogroup "$dir/cache" "$dir/temp"
	fi
	cat >"$dir/nginx.conf" <<EOF
# Rendered by deploy/local/cluster.sh from deploy/nginx/flashgate.conf.
$user
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events {
    worker_connections 4096;
}
http {
    default_type application/octet-stream;
    client_body_temp_path $dir/temp/body;
    proxy_temp_path $dir/temp/proxy;
    fastcgi_temp_path $dir/temp/fastcgi;
    uwsgi_temp_path $dir/temp/uwsgi;
    scgi_temp_path $dir/temp/scgi;
    access_log $dir/logs/other.log;
    include $dir/flashgate.conf;
}
EOF
}

# running reports whether any recorded process still runs.
running() {
	local name pid kind check
	[ -f "$pids" ] || return 1
	while read -r name pid kind check; do
		if alive "$pid" "$kind"; then
			return 0
		fi
	done <"$pids"
	return 1
}

# start_redis_pair starts a Redis primary and its replica (deploy/redis/*.conf)
# and sets redis, replicas and redis_line.
start_redis_pair() {
	mkdir -m 0700 "$state/redis-primary" "$state/redis-replica"
	free_port
	local rp=$port
	launch redis-primary redis-server "redis://127.0.0.1:$rp" \
		redis-server "$root/deploy/redis/primary.conf" --port "$rp" --bind 127.0.0.1 \
		--dir "$state/redis-primary" --daemonize no --logfile ""
	wait_ready redis-primary
	free_port
	local rr=$port
	launch redis-replica redis-server "redis://127.0.0.1:$rr" \
		redis-server "$root/deploy/redis/replica.conf" --port "$rr" --bind 127.0.0.1 \
		--dir "$state/redis-replica" --daemonize no --logfile "" --replicaof 127.0.0.1 "$rp"
	wait_ready redis-replica
	wait_replica 127.0.0.1 "$rr"
	redis="redis://127.0.0.1:$rp/0"
	replicas="redis://127.0.0.1:$rr/0"
	redis_line="primary 127.0.0.1:$rp, replica 127.0.0.1:$rr"
}

# start_redis_cluster starts six cluster-enabled Redis servers (the primary
# configuration, each with its own bus port), joins them into a cluster of
# three primaries with one replica each and waits until every node reports
# cluster_state:ok; it sets redis, replicas (empty: gateways read from the
# cluster's replicas) and redis_line.
start_redis_cluster() {
	local i addrs=() p bus
	for i in 1 2 3 4 5 6; do
		free_port
		p=$port
		free_port
		bus=$port
		mkdir -m 0700 "$state/redis-node-$i"
		launch "redis-node-$i" redis-server "redis://127.0.0.1:$p" \
			redis-server "$root/deploy/redis/primary.conf" --port "$p" --bind 127.0.0.1 \
			--dir "$state/redis-node-$i" --daemonize no --logfile "" \
			--cluster-enabled yes --cluster-config-file nodes.conf --cluster-port "$bus" \
			--cluster-node-timeout 2000 --cluster-require-full-coverage no
		addrs+=("127.0.0.1:$p")
	done
	for i in 1 2 3 4 5 6; do wait_ready "redis-node-$i"; done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
		>"$state/logs/redis-cluster-create.log" 2>&1 ||
		die "redis-cli --cluster create failed; see $state/logs/redis-cluster-create.log"
	local a ok
	for i in $(seq 1 300); do
		ok=1
		for a in "${addrs[@]}"; do
			redis-cli -h "${a%:*}" -p "${a##*:}" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
		done
		[ "$ok" = 1 ] && break
		sleep 0.1
	done
	[ "$ok" = 1 ] || die "the Redis Cluster did not reach cluster_state:ok in 30 s"
	redis="redis+cluster://$(
		IFS=,
		echo "${addrs[*]}"
	)"
	replicas=""
	redis_line="cluster ${addrs[*]} (3 primaries, 3 replicas)"
}

# start_redis_sentinel starts a Redis primary and a replica, both with
# primary.conf (AOF on: either may be the primary after a failover), and
# three Sentinels watching them (deploy/redis/sentinel.conf, quorum 2); it
# waits until every Sentinel sees the replica and the two others, and sets
# redis (redis+sentinel://s1,s2,s3/flashgate), replicas (empty: the gateways
# read from the primary Sentinel names) and redis_line.
start_redis_sentinel() {
	mkdir -m 0700 "$state/redis-primary" "$state/redis-replica"
	# Each node runs a copy of primary.conf: Sentinel sends CONFIG REWRITE
	# to the nodes it reconfigures, which would rewrite the file in deploy/.
	cp "$root/deploy/redis/primary.conf" "$state/redis-primary/redis.conf"
	cp "$root/deploy/redis/primary.conf" "$state/redis-replica/redis.conf"
	free_port
	local rp=$port
	launch redis-primary redis-server "redis://127.0.0.1:$rp" \
		redis-server "$state/redis-primary/redis.conf" --port "$rp" --bind 127.0.0.1 \
		--dir "$state/redis-primary" --daemonize no --logfile ""
	wait_ready redis-primary
	free_port
	local rr=$port
	launch redis-replica redis-server "redis://127.0.0.1:$rr" \
		redis-server "$state/redis-replica/redis.conf" --port "$rr" --bind 127.0.0.1 \
		--dir "$state/redis-replica" --daemonize no --logfile "" --replicaof 127.0.0.1 "$rp"
	wait_ready redis-replica
	wait_replica 127.0.0.1 "$rr"
	local i sp addrs=()
	for i in 1 2 3; do
		free_port
		sp=$port
		mkdir -m 0700 "$state/sentinel-$i"
		sed "s/^sentinel monitor flashgate .*/sentinel monitor flashgate 127.0.0.1 $rp 2/" \
			"$root/deploy/redis/sentinel.conf" >"$state/sentinel-$i/sentinel.conf"
		grep -q "^sentinel monitor flashgate 127.0.0.1 $rp 2$" "$state/sentinel-$i/sentinel.conf" ||
			die "deploy/redis/sentinel.conf lost its 'sentinel monitor flashgate' line"
		launch "sentinel-$i" redis-server "redis://127.0.0.1:$sp" \
			redis-server "$state/sentinel-$i/sentinel.conf" --sentinel --port "$sp" --bind 127.0.0.1 \
			--dir "$state/sentinel-$i"
		addrs+=("127.0.0.1:$sp")
	done
	for i in 1 2 3; do wait_ready "sentinel-$i"; done
	local a ok info
	for i in $(seq 1 300); do
		ok=1
		for a in "${addrs[@]}"; do
			info=$(redis-cli -h "${a%:*}" -p "${a##*:}" sentinel master flashgate 2>/dev/null | tr -d '\r' | paste -sd' ')
			[[ " $info " == *" num-slaves 1 "* && " $info " == *" num-other-sentinels 2 "* ]] || ok=0
		done
		[ "$ok" = 1 ] && break
		sleep 0.1
	done
	[ "$ok" = 1 ] || die "the Sentinels did not all see the replica and each other in 30 s; see $state/logs/sentinel-*.log"
	redis="redis+sentinel://$(
		IFS=,
		echo "${addrs[*]}"
	)/flashgate"
	replicas=""
	redis_line="primary 127.0.0.1:$rp, replica 127.0.0.1:$rr, Sentinels ${addrs[*]} (master flashgate, quorum 2)"
}

cmd_up() {
	local db="" use_nginx=1 redis_cluster=0 redis_sentinel=0
	while [ $# -gt 0 ]; do
		case $1 in
		--db)
			[ $# -ge 2 ] || die "--db needs a URL"
			db=$2
			shift 2
			;;
		--db=*)
			db=${1#--db=}
			shift
			;;
		--no-nginx)
			use_nginx=0
			shift
			;;
		--redis-cluster)
			redis_cluster=1
			shift
			;;
		--redis-sentinel)
			redis_sentinel=1
			shift
			;;
		*) usage ;;
		esac
	done
	[ -x "$bin" ] || die "$bin not found or not executable: run 'make build' first"
	command -v redis-server >/dev/null 2>&1 || die "redis-server not found (Debian: apt-get install redis-server)"
	command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (Debian: apt-get install redis-tools)"
	command -v curl >/dev/null 2>&1 || die "curl not found"
	if running; then
		die "a cluster is already running in $state ('$0 status', '$0 down')"
	fi

	if [ -e "$state" ]; then
		# Remove only a directory an earlier run made, never anything else
		# FLASHGATE_CLUSTER_DIR may point at.
		if [ -f "$state/pids" ] || [ -f "$state/pids.stopped" ] || [ -z "$(ls -A "$state" 2>/dev/null)" ]; then
			rm -rf "$state"
		else
			die "$state exists and was not made by cluster.sh; set FLASHGATE_CLUSTER_DIR to a new path"
		fi
	fi
	mkdir -p "$state"
	# 0711: other users cannot list it, but nginx workers (nobody) can reach
	# their cache directory inside it.
	chmod 0711 "$state"
	mkdir -m 0700 "$state/logs"
	: >"$pids"
	db=${db:-sqlite://$state/orders.db}

	# Tear everything down again if any step below fails.
	up_done=0
	trap 'if [ "$up_done" = 0 ]; then echo "cluster.sh: start-up failed; stopping what was started (logs in $state/logs)" >&2; cmd_down >/dev/null 2>&1 || true; fi' EXIT

	local redis replicas redis_line
	[ "$redis_cluster$redis_sentinel" != 11 ] || die "--redis-cluster and --redis-sentinel exclude each other"
	if [ "$redis_cluster" = 1 ]; then
		start_redis_cluster
	elif [ "$redis_sentinel" = 1 ]; then
		start_redis_sentinel
	else
		start_redis_pair
	fi

	# The secrets live only in the environment of the processes started below.
	FLASHGATE_JWT_SECRET=$(random_secret)
	FLASHGATE_ADMIN_TOKEN=$(random_secret)
	FLASHGATE_INVENTORY_TOKEN=$(random_secret) # gateways ↔ inventory; never printed
	export FLASHGATE_JWT_SECRET FLASHGATE_ADMIN_TOKEN FLASHGATE_INVENTORY_TOKEN

	# The control plane first and alone: it creates the schema, so the other
	# processes do not race each other migrating one SQLite file.
	free_port
	local admin=$port
	launch controlplane flashgate "http://127.0.0.1:$admin/readyz" \
		"$bin" controlplane --admin-listen "127.0.0.1:$admin" --redis "$redis" --db "$db"
	wait_ready controlplane

	local i inv=() gws=()
	for i in 1 2; do
		free_port
		launch "ordersink-$i" flashgate "http://127.0.0.1:$port/readyz" \
			"$bin" ordersink --admin-listen "127.0.0.1:$port" --redis "$redis" --db "$db"
	done
	for i in 1 2; do
		free_port
		inv+=("http://127.0.0.1:$port")
		launch "inventory-$i" flashgate "http://127.0.0.1:$port/readyz" \
			"$bin" inventory --listen "127.0.0.1:$port" --redis "$redis"
	done
	for i in 1 2; do wait_ready "ordersink-$i"; done
	for i in 1 2; do wait_ready "inventory-$i"; done
	local inventory
	inventory=$(
		IFS=,
		echo "${inv[*]}"
	)
	for i in 1 2; do
		free_port
		gws+=("127.0.0.1:$port")
		launch "gateway-$i" flashgate "http://127.0.0.1:$port/readyz" \
			"$bin" gateway --listen "127.0.0.1:$port" --redis "$redis" ${replicas:+--redis-replicas "$replicas"} \
			--db "$db" --inventory "$inventory"
	done
	for i in 1 2; do wait_ready "gateway-$i"; done

	local public="http://${gws[0]}" front="gateway-1; nginx not in front"
	if [ "$use_nginx" = 1 ] && command -v nginx >/dev/null 2>&1; then
		free_port
		nginx_config "$state/nginx" "127.0.0.1:$port" "${gws[@]}"
		launch nginx nginx "http://127.0.0.1:$port/healthz" \
			nginx -p "$state/nginx" -c "$state/nginx/nginx.conf" -e "$state/nginx/logs/error.log" -g 'daemon off;'
		wait_ready nginx
		public="http://127.0.0.1:$port"
		front="nginx in front of both gateways"
	fi
	up_done=1

	# Non-secret settings, for other shells: . "$state/env"
	cat >"$state/env" <<EOF
FLASHGATE_REDIS=$redis
FLASHGATE_REDIS_REPLICAS=$replicas
FLASHGATE_DB=$db
FLASHGATE_TARGET=$public
FLASHGATE_ADMIN=http://127.0.0.1:$admin
EOF
	cat <<EOF
flashgate cluster is up; state, logs and pids in $state
  public:     $public  ($front)
  gateways:   ${gws[*]}
  inventory:  ${inv[*]}
  admin:      http://127.0.0.1:$admin  (control plane: admin API, dashboard /admin/, /metrics)
  redis:      $redis_line
  database:   $db

Secrets, printed this once and stored nowhere (export them to use the cluster):
  export FLASHGATE_JWT_SECRET=$FLASHGATE_JWT_SECRET
  export FLASHGATE_ADMIN_TOKEN=$FLASHGATE_ADMIN_TOKEN

Then, for example:
  . $state/env
  curl -H "Authorization: Bearer \$FLASHGATE_ADMIN_TOKEN" \$FLASHGATE_ADMIN/admin/sales
  $bin crowd --sale SALE --users 10000
  $0 status
  $0 down
EOF
}

cmd_down() {
	local name pid kind check i stopped=0
	if [ ! -f "$pids" ]; then
		echo "no cluster recorded in $state"
		return 0
	fi
	# Newest first: nginx, gateways, inventory, order sinks (they keep
	# draining until told to stop), control plane, then the replica and the
	# primary, which writes its AOF out on SIGTERM.
	while read -r name pid kind check; do
		if ! alive "$pid" "$kind"; then
			continue
		fi
		kill -TERM "$pid" 2>/dev/null || continue
		for i in $(seq 1 150); do
			alive "$pid" "$kind" || break
			sleep 0.1
		done
		if alive "$pid" "$kind"; then
			echo "$name (pid $pid) did not stop within 15 s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		echo "stopped $name (pid $pid)"
		stopped=$((stopped + 1))
	done < <(tac "$pids")
	mv "$pids" "$pids.stopped"
	echo "$stopped processes stopped; logs and data kept in $state ('up' starts afresh)"
}

cmd_status() {
	local name pid kind check bad=0 state_word health
	if [ ! -f "$pids" ]; then
		echo "no cluster running (state dir $state)"
		return 1
	fi
	printf '%-14s %-8s %-8s %-6s %s\n' NAME PID STATE READY CHECK
	while read -r name pid kind check; do
		if alive "$pid" "$kind"; then
			state_word=running
			if ready "$check"; then health=yes; else
				health=no
				bad=1
			fi
		else
			state_word=dead
			health=-
			bad=1
		fi
		printf '%-14s %-8s %-8s %-6s %s\n' "$name" "$pid" "$state_word" "$health" "$check"
	done <"$pids"
	local line hp
	line=$(grep '^redis-replica ' "$pids" | tail -n 1 || true)
	if [ -n "$line" ]; then
		read -r _ _ _ check <<<"$line"
		hp=${check#redis://}
		echo
		echo "replica link:"
		redis-cli -h "${hp%:*}" -p "${hp##*:}" info replication 2>/dev/null |
			grep -E '^(master_link_status|master_last_io_seconds_ago|master_sync_in_progress|slave_repl_offset)' |
			tr -d '\r' | sed 's/^/  /' || echo "  (replica not answering)"
	fi
	echo
	echo "logs: $state/logs"
	return "$bad"
}

main() {
	[ $# -ge 1 ] || usage
	local cmd=$1
	shift
	case $cmd in
	up) cmd_up "$@" ;;
	down) cmd_down ;;
	status) cmd_status ;;
	nginx-config) nginx_config "$@" ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"

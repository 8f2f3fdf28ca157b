#!/usr/bin/env bash
# with-testenv.sh CMD...: runs CMD with a throwaway PostgreSQL cluster on a free
# loopback port (FLASHGATE_TEST_POSTGRES) and FLASHGATE_TEST_REQUIRE=1, so that
# tests needing a real server fail instead of skipping. Redis servers are
# started by the Go tests themselves (internal/testenv/redistest). The cluster is
# stopped and removed on exit, whether CMD passed or not.
set -euo pipefail

find_pg_bin() {
  local d
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(command -v pg_ctl)"; return
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return; }
  done
  return 1
}

pgbin=$(find_pg_bin) || { echo "with-testenv: PostgreSQL not found (install Debian's postgresql)" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))
dir=$(mktemp -d /tmp/flashgate-pg.XXXXXX)
as_user=()
if [ "$(id -u)" = 0 ]; then
  # initdb refuses to run as root: the cluster belongs to an unprivileged user.
  pguser=postgres
  id "$pguser" >/dev/null 2>&1 || pguser=nobody
  chown "$pguser" "$dir"
  as_user=(runuser -u "$pguser" --)
fi

cleanup() {
  "${as_user[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

"${as_user[@]}" "$pgbin/initdb" -D "$dir/data" -U flashgate --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 1; }
"${as_user[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w -t 60 \
  -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c full_page_writes=off -c max_connections=300" start >/dev/null \
  || { cat "$dir/pg.log" >&2; exit 1; }

export FLASHGATE_TEST_POSTGRES="postgres://flashgate@127.0.0.1:$port/postgres?sslmode=disable"
export FLASHGATE_TEST_REQUIRE=1
"$@"

#!/usr/bin/env bash
# Starts what is stopped (start-deps.sh), then fails clearly, naming the address tried, when the test dependencies are down.
set -u
"$(dirname "$0")/start-deps.sh"
pg="${HOOKSTAMP_TEST_PG_HOSTPORT:-127.0.0.1:5432}"
rd="${HOOKSTAMP_TEST_REDIS:-127.0.0.1:6379}"
my="${HOOKSTAMP_TEST_MYSQL_HOSTPORT:-127.0.0.1:3306}"
ok=1
if ! (exec 3<>"/dev/tcp/${pg%:*}/${pg#*:}") 2>/dev/null; then
  echo "make test: PostgreSQL is not reachable at $pg" >&2
  echo "  start it: pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start" >&2
  ok=0
fi
if ! (exec 3<>"/dev/tcp/${rd%:*}/${rd#*:}") 2>/dev/null; then
  echo "make test: Redis is not reachable at $rd" >&2
  echo "  start it: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no" >&2
  ok=0
fi
if ! (exec 3<>"/dev/tcp/${my%:*}/${my#*:}") 2>/dev/null; then
  echo "make test: MariaDB/MySQL is not reachable at $my (the inbox package's tests)" >&2
  echo "  start it: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd" >&2
  ok=0
fi
command -v redis-server >/dev/null || { echo "make test: redis-server is not on PATH (outage tests start their own)" >&2; ok=0; }
# The PgBouncer test starts its own pgbouncer: install Debian's package on a
# fresh machine rather than fail (make test does its own set-up).
has_pgbouncer() { command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; }
if ! has_pgbouncer && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "make test: installing pgbouncer (apt-get install pgbouncer)" >&2
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer; } >/dev/null 2>&1 || true
  # The tests start their own; the package's service (on :6432) stays off.
  if command -v systemctl >/dev/null; then systemctl disable --now pgbouncer >/dev/null 2>&1 || true; fi
fi
has_pgbouncer || { echo "make test: pgbouncer is not installed (apt-get install -y pgbouncer; the PgBouncer test starts its own)" >&2; ok=0; }
# The console's browser tests drive Debian's chromium headless (chromedp).
has_chromium() { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }
if ! has_chromium && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "make test: installing chromium (apt-get install chromium)" >&2
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } >/dev/null 2>&1 || true
fi
has_chromium || { echo "make test: chromium is not installed (apt-get install -y chromium; the console's browser tests drive it)" >&2; ok=0; }
[ $ok = 1 ] || exit 1

#!/usr/bin/env bash
# Starts the test dependencies that are installed but stopped (PostgreSQL,
# Redis, MariaDB), with the commands this kind of machine uses, and waits up
# to a minute for their ports. What is not installed is left for
# check-deps.sh to name.
set -u
up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! up 5432 && command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start >/dev/null 2>&1 || true
fi
if ! up 6379 && command -v redis-server >/dev/null; then
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null 2>&1 || true
fi
if ! up 3306 && [ -x /usr/sbin/mariadbd ] && command -v start-stop-daemon >/dev/null; then
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >/dev/null 2>&1 || true
fi
for _ in $(seq 1 60); do
  if up 5432 && up 6379 && up 3306; then exit 0; fi
  sleep 1
done
exit 0

#!/usr/bin/env bash
# Start the web server in the background and wait until it answers: the demo's runserver, or
# gunicorn with BOLTZ_WEB_SERVER=gunicorn (`make serve`).
#   scripts/serve_web.sh ADDR RUN_DIR [SECONDS]
# ADDR is runserver's address (127.0.0.1:8000, 0.0.0.0:8000 or 8000). The server's pid goes to
# RUN_DIR/web.pid and its output to RUN_DIR/web.log. Exits 0 once http://ADDR/ answers from this
# server; otherwise (the port is taken, the server stopped, or SECONDS, default 60, passed) it
# stops what it started, prints why and the log's last lines, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
ADDR="$1"
RUN="$2"
SECONDS_LEFT="${3:-60}"
PY="${PY:-.venv/bin/python}"
LOG="$RUN/web.log"
mkdir -p "$RUN"

# host:port of ADDR, and where to reach it from here (a wildcard address is reached locally).
HOST="127.0.0.1"
PORT="$ADDR"
if [[ "$ADDR" == *:* ]]; then HOST="${ADDR%:*}"; PORT="${ADDR##*:}"; fi
REACH="$HOST"
if [ "$HOST" = "0.0.0.0" ] || [ -z "$HOST" ]; then REACH="127.0.0.1"; fi
URL="http://$REACH:$PORT/"

fail() {  # fail REASON: stop the server if it runs, say why with the log's last lines
  if [ -n "${pid:-}" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
  rm -f "$RUN/web.pid"
  echo "boltz: the web server is not running at http://$ADDR/: $1" >&2
  if [ -s "$LOG" ]; then
    echo "boltz: the last lines of $LOG:" >&2
    tail -n 15 "$LOG" | sed 's/^/  /' >&2
  fi
  exit 1
}

# Refuse a port another program listens on: a probe would otherwise reach that program.
if ! taken=$("$PY" - "$HOST" "$PORT" <<'EOF' 2>&1
import socket, sys
host, port = sys.argv[1] or "127.0.0.1", sys.argv[2]
if not port.isdigit() or not 0 < int(port) < 65536:
    sys.exit(f"{port!r} is not a port: give HOST:PORT or PORT (127.0.0.1:8000)")
port = int(port)
family = socket.AF_INET6 if ":" in host else socket.AF_INET
with socket.socket(family) as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver does
    try:
        probe.bind((host, port))
    except OSError as exc:
        sys.exit(f"{host}:{port} is not free ({exc.strerror}); stop what uses it, or set "
                 "BOLTZ_DEMO_ADDR to another address (BOLTZ_DEMO_ADDR=127.0.0.1:8001 make demo)")
EOF
); then
  : > "$LOG"
  fail "$taken"
fi

if [ "${BOLTZ_WEB_SERVER:-runserver}" = "gunicorn" ]; then
  # Production (`make serve`): gunicorn's threads, static files by WhiteNoise, settings in
  # boltz_web/gunicorn_conf.py (BOLTZ_WEB_WORKERS, BOLTZ_WEB_THREADS, BOLTZ_WEB_TIMEOUT).
  BOLTZ_WEB_ADDR="$HOST:$PORT" nohup "$(dirname "$PY")/gunicorn" -c python:boltz_web.gunicorn_conf \
    boltz_web.wsgi > "$LOG" 2>&1 &
else
  nohup "$PY" manage.py runserver "$ADDR" --noreload --insecure > "$LOG" 2>&1 &
fi
pid=$!
echo "$pid" > "$RUN/web.pid"

# Any answer below 500 from our own process (still alive afterwards) is a server at work.
deadline=$(( $(date +%s) + SECONDS_LEFT ))
until "$PY" - "$URL" <<'EOF' 2>/dev/null
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "admin/login/", timeout=2)
except urllib.error.HTTPError as exc:
    sys.exit(exc.code >= 500)
except OSError:
    sys.exit(1)
EOF
do
  kill -0 "$pid" 2>/dev/null || { status=0; wait "$pid" || status=$?; fail "it exited (status $status)"; }
  [ "$(date +%s)" -lt "$deadline" ] || fail "no answer within ${SECONDS_LEFT}s"
  sleep 0.3
done
kill -0 "$pid" 2>/dev/null || fail "it stopped"

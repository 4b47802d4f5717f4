#!/usr/bin/env bash
# The demo: migrate, admin user, example tasks, a worker, a few attempts, the web server.
# Run through `make demo`, which installs and starts everything this needs first.
# BOLTZ_DEMO_ADDR: where the web server listens (default 127.0.0.1:8000).
# BOLTZ_WORKER_WAIT: how long to wait at most for the workers to start (default 600 s).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
RUN=.data/run
ADDR="${BOLTZ_DEMO_ADDR:-127.0.0.1:8000}"
mkdir -p "$RUN"

. scripts/processes.sh

if [ "${1:-}" = "stop" ]; then stop web; stop beat; stop worker; exit 0; fi

$PY manage.py migrate --noinput -v0
# Static files under content-hashed names, gzipped, which the web server caches for a year.
$PY manage.py collectstatic --noinput -v0
$PY manage.py ensure_admin
$PY manage.py load_task examples/*/
# The clone the SWE-bench example rows name (docs/INTEGRATIONS.md), where the web process and
# the worker look for SWE-bench repositories, unless BOLTZ_SWEBENCH_REPOS names a folder of yours.
if [ -z "${BOLTZ_SWEBENCH_REPOS:-}" ]; then
  export BOLTZ_SWEBENCH_REPOS="$PWD/.data/swebench-repos"
  sh examples/swebench_repos.sh "$BOLTZ_SWEBENCH_REPOS" > /dev/null
fi

start_worker
start_beat

# The demo's attempts, once: a second demo finds them and starts none.
for task in fix-add text-utils; do
  $PY manage.py run_attempts "$task" --agent reference -n 1 --top-up --timeout 300
  $PY manage.py run_attempts "$task" --agent noop -n 1 --top-up --timeout 300
done

stop web
# Starts the server and waits until it answers; says why and exits 1 when it does not.
PY="$PY" scripts/serve_web.sh "$ADDR" "$RUN"
URL="http://$ADDR"
case "$ADDR" in
  *:*) ;;
  *) URL="http://127.0.0.1:$ADDR" ;;
esac
echo
echo "Boltz is running: $URL/ (the API: $URL/api/docs; log: $RUN/web.log)"
$PY manage.py ensure_admin
echo "An API token for the SDK: $PY manage.py create_token admin"
echo "Stop it with: make stop"

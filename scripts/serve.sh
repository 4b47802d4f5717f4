#!/usr/bin/env bash
# Production on one host (`make serve`): the database migrated, static files collected (hashed
# names that WhiteNoise serves with a year's caching), a worker, beat, and the web process under
# gunicorn (boltz_web/gunicorn_conf.py). `make stop` stops all three (their pid files in
# .data/run, as the demo's).
# BOLTZ_ENV is production unless set: the settings then refuse to start without
# BOLTZ_SECRET_KEY, BOLTZ_ALLOWED_HOSTS and a DATABASE_URL (or BOLTZ_ALLOW_SQLITE=1), saying so.
# BOLTZ_WEB_ADDR: where gunicorn listens (default 127.0.0.1:8000).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
RUN=.data/run
ADDR="${BOLTZ_WEB_ADDR:-127.0.0.1:8000}"
export BOLTZ_ENV="${BOLTZ_ENV:-production}"
mkdir -p "$RUN"

. scripts/processes.sh

# The settings' refusal (BOLTZ_ENV=production without its values) stops here, with its message.
if ! checked=$($PY manage.py check --deploy 2>&1); then
  refused=$(printf '%s\n' "$checked" | sed -n 's/^django.core.exceptions.ImproperlyConfigured: //p')
  printf 'boltz: %s\n' "${refused:-$checked}" >&2
  exit 1
fi
printf '%s\n' "$checked"
$PY manage.py migrate --noinput -v0
$PY manage.py collectstatic --noinput -v0

start_worker
start_beat

stop web
BOLTZ_WEB_SERVER=gunicorn PY="$PY" scripts/serve_web.sh "$ADDR" "$RUN"
echo "boltz: serving http://$ADDR/ under gunicorn (log: $RUN/web.log); stop with: make stop"

#!/usr/bin/env bash
# Boltz's systemd units (deploy/systemd/*.service) for this checkout: docs/DEPLOY.md.
#   scripts/systemd_units.sh [--enable] [DEST] [ENV_FILE]
# Writes boltz-web, boltz-worker and boltz-beat into DEST (/etc/systemd/system), running this
# checkout's .venv and reading ENV_FILE (/etc/boltz/boltz.env), and checks them with
# `systemd-analyze verify` (each command exists, each line parses). With --enable, where
# systemd runs this machine, it reloads systemd and enables and starts them: all three, or the
# worker alone with BOLTZ_UNITS=worker (a host that only runs sandboxes).
set -euo pipefail
cd "$(dirname "$0")/.."
ENABLE=0
if [ "${1:-}" = "--enable" ]; then ENABLE=1; shift; fi
DEST="${1:-/etc/systemd/system}"
ENV_FILE="${2:-/etc/boltz/boltz.env}"
ROOT="$(pwd)"
UNITS="${BOLTZ_UNITS:-worker beat web}"

if [ ! -f "$ENV_FILE" ]; then
  echo "boltz: $ENV_FILE does not exist: copy deploy/boltz.env.example there and fill it in" >&2
  exit 1
fi
if [ ! -x "$ROOT/.venv/bin/gunicorn" ]; then
  echo "boltz: $ROOT/.venv is not installed: run make install first" >&2
  exit 1
fi
mkdir -p "$DEST"
written=()
for name in $UNITS; do
  unit="deploy/systemd/boltz-$name.service"
  [ -f "$unit" ] || { echo "boltz: no unit boltz-$name (BOLTZ_UNITS: worker, beat, web)" >&2; exit 1; }
  sed -e "s#@ROOT@#$ROOT#g" -e "s#@ENV_FILE@#$ENV_FILE#g" "$unit" > "$DEST/boltz-$name.service"
  written+=("$DEST/boltz-$name.service")
done
# A line systemd cannot parse is only a warning to it: here it is a failure.
if command -v systemd-analyze > /dev/null; then
  if ! said=$(systemd-analyze verify "${written[@]}" 2>&1) || [ -n "$said" ]; then
    printf 'boltz: the units do not verify:\n%s\n' "$said" >&2
    exit 1
  fi
fi
echo "boltz: wrote ${written[*]} (checked)"
if [ "$ENABLE" = 1 ]; then
  if [ "$(cat /proc/1/comm 2>/dev/null)" != systemd ]; then
    echo "boltz: systemd does not run this machine: start the units' commands another way (make serve)" >&2
    exit 1
  fi
  systemctl daemon-reload
  systemctl enable --now $(printf 'boltz-%s ' $UNITS)
  echo "boltz: enabled and started: $(printf 'boltz-%s ' $UNITS)"
fi

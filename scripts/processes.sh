# The processes of one host that the demo (scripts/demo.sh) and `make serve` (scripts/serve.sh)
# start and stop, each with its pid file and log in $RUN. Sourced: the caller sets PY and RUN.

stop() {  # stop a process started earlier, by its pid file
  local pidfile="$RUN/$1.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "boltz: stopping the earlier $1 (pid $(cat "$pidfile"))"
    kill "$(cat "$pidfile")" 2>/dev/null || true
    for _ in $(seq 1 70); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$pidfile"
}

start_worker() {  # this host's workers (manage.py run_worker), once all three answer
  stop worker
  nohup $PY manage.py run_worker > "$RUN/worker.log" 2>&1 &
  echo $! > "$RUN/worker.pid"
  # Until its three workers answer through Redis, as long as the machine needs
  # (BOLTZ_WORKER_WAIT, 600 s), with progress; when they do not, it says what failed with the
  # log's last lines.
  $PY manage.py wait_for_workers "$(cat "$RUN/worker.pid")" --log "$RUN/worker.log" || exit 1
  echo "boltz: worker running (log: $RUN/worker.log)"
}

start_beat() {  # Celery beat: retention and the reaper, every hour
  stop beat
  nohup $PY manage.py run_beat > "$RUN/beat.log" 2>&1 &
  echo $! > "$RUN/beat.pid"
  echo "boltz: beat running: retention and reaper every hour (log: $RUN/beat.log)"
}

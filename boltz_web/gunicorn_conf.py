"""gunicorn's settings for the production web process (`make serve`, scripts/serve.sh):
`gunicorn -c python:boltz_web.gunicorn_conf boltz_web.wsgi`.

Threads (the gthread worker), because an API client's streamed exec holds its request for as
long as the command runs: each one takes a thread, not a process. gthread's `timeout` is the
worker's heartbeat, written by its main loop every second whatever its threads do, so a long
streamed exec is never cut by it (tests/test_serving.py streams past a 3 s timeout;
docs/PERFORMANCE.md, "Serving", a 35 s one past the default 30 s).

BOLTZ_WEB_ADDR    where to listen (127.0.0.1:8000; 0.0.0.0:8000 for every interface)
BOLTZ_WEB_WORKERS processes (2: one per core of a small machine)
BOLTZ_WEB_THREADS threads per process: requests served at once per process, streams included (8)
BOLTZ_WEB_TIMEOUT seconds a process may go without a heartbeat before it is restarted (30)
"""

from boltz_web.env_values import env_int, env_str

bind = env_str("BOLTZ_WEB_ADDR", "127.0.0.1:8000")
worker_class = "gthread"
workers = env_int("BOLTZ_WEB_WORKERS", 2, minimum=1)
threads = env_int("BOLTZ_WEB_THREADS", 8, minimum=1)
timeout = env_int("BOLTZ_WEB_TIMEOUT", 30, minimum=1)
graceful_timeout = 30
keepalive = 5  # behind a reverse proxy that keeps its connections open
# Django is loaded once, before the processes are forked: a setting that refuses to start
# (BOLTZ_ENV=production without its values) stops gunicorn at once with its message, instead of
# each process failing in turn; and the processes share the loaded code's memory.
preload_app = True
# Each request is logged once, by Boltz (boltz_web/request_log.py: with its user and request
# id, as text or JSON), not again by gunicorn; gunicorn's own messages go to stderr.
accesslog = None
errorlog = "-"
# A request line or header this long is refused before Django sees it.
limit_request_line = 8190
# No control socket (gunicorn 27's, in ~/.gunicorn by default): two installations on one host
# would share its path; Boltz's processes are stopped by their pid files (`make stop`).
control_socket_disable = True

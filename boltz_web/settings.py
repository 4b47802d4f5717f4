"""Boltz settings: one module, read from the environment (see the README's settings table)."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from boltz_web.env_values import (
    env_bool,
    env_bytes,
    env_hosts_and_networks,
    env_int,
    env_seconds,
    env_str,
)
from boltz_web.file_storage import default_storage_settings

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("BOLTZ_DEBUG", False)
SECRET_KEY = env_str("BOLTZ_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and env_bool("BOLTZ_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("BOLTZ_SECRET_KEY must be set")
    # Django's insecure prefix: `manage.py check --deploy` reports it (security.W009).
    SECRET_KEY = "django-insecure-boltz-development-key-set-BOLTZ_SECRET_KEY-in-production"
ALLOWED_HOSTS = [
    h.strip()
    for h in env_str("BOLTZ_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
    if h.strip()
]
# BOLTZ_ENV=production (`make serve` sets it): refuse to start on the demo's defaults, a
# development key, the local host names, SQLite (unless BOLTZ_ALLOW_SQLITE says a one-host
# installation means it), or DEBUG; the message names every setting to give
# (boltz_web/production.py).
BOLTZ_ENV = env_str("BOLTZ_ENV", "development").strip().lower()
if BOLTZ_ENV not in ("development", "production"):
    raise ImproperlyConfigured(
        f"BOLTZ_ENV={BOLTZ_ENV!r}: expected 'development' (the default) or 'production'"
    )

# --- HTTPS, a reverse proxy, sign-in (docs/ACCESS.md) --------------------------------------
# Served over HTTPS only (production): plain http is redirected to https, the session and CSRF
# cookies travel over https only, and browsers are told (HSTS) to use nothing but https for
# BOLTZ_HSTS_SECONDS. Off by default, so `make demo` serves plain http on 127.0.0.1.
BOLTZ_HTTPS = env_bool("BOLTZ_HTTPS", False)
SECURE_SSL_REDIRECT = BOLTZ_HTTPS
# Except `/healthz`: a load balancer probes the web process itself, over plain http.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = BOLTZ_HTTPS
CSRF_COOKIE_SECURE = BOLTZ_HTTPS
SECURE_HSTS_SECONDS = int(env_seconds("BOLTZ_HSTS_SECONDS", "365d")) if BOLTZ_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("BOLTZ_HSTS_INCLUDE_SUBDOMAINS", True)
# Preloading commits the whole domain to https in browsers for months: the operator's choice, so
# the deploy check's reminder of it (security.W021) is silenced while it is off.
SECURE_HSTS_PRELOAD = env_bool("BOLTZ_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# Behind a reverse proxy that ends TLS: its X-Forwarded-Proto says whether a request came over
# https, and the last address of its X-Forwarded-For is the client's (for the sign-in limit).
# Only behind such a proxy: without one, any client could claim https or any address.
BOLTZ_BEHIND_PROXY = env_bool("BOLTZ_BEHIND_PROXY", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BOLTZ_BEHIND_PROXY else None
# Failed sign-ins (the login page and the admin's) one client may make for one user name within
# the window; past them it is refused (429) until the window of its first failure ends. A
# client failing with any user names is refused after 4 times as many.
BOLTZ_LOGIN_FAILURES = env_int("BOLTZ_LOGIN_FAILURES", 5, minimum=1)
BOLTZ_LOGIN_WINDOW = int(env_seconds("BOLTZ_LOGIN_WINDOW", "15m"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # runserver (the demo's and the tests' web process) leaves static files to WhiteNoise.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "ninja",
    "attempts",
]

MIDDLEWARE = [
    # One log line per request, when its answer has been sent (boltz_web/request_log.py).
    "boltz_web.request_log.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files: hashed names cached for a year, precompressed (boltz_web/static_storage.py).
    "boltz_web.static_storage.StaticFilesMiddleware",
    # Gzip for pages and JSON, never for streams or downloads (boltz_web/compression.py).
    "boltz_web.compression.PageGZipMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "attempts.web.middleware.SecurityHeadersMiddleware",
    # Attempts of a host gone silent end before any page or API call reads them.
    "attempts.web.middleware.LostHostsMiddleware",
    # Redis down while a page needed the workers: a 503 page saying nothing started, not a 500.
    "attempts.web.middleware.WorkersUnreachablePages",
    # A GET on a POST-only page's URL: a page saying what to do, not Django's empty 405.
    "boltz_web.error_pages.MethodNotAllowedPages",
    # A body over its limit refused (413) from its Content-Length, before anything reads it
    # (no middleware above reads a body; forms are read by views and CSRF's process_view).
    "boltz_web.request_limits.RequestBodyLimit",
]
# A form whose CSRF check failed: a page in Boltz's layout with a way back.
CSRF_FAILURE_VIEW = "boltz_web.error_pages.csrf_failure"
AUTHENTICATION_BACKENDS = ["attempts.web.auth.StaffBackend"]

ROOT_URLCONF = "boltz_web.urls"
WSGI_APPLICATION = "boltz_web.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # `score` and `state_badge` on every page (attempts/web/formats.py); terminal
            # output's colours, escaped (`ansi`, `noansi`: attempts/web/terminal.py).
            "builtins": ["attempts.web.formats", "attempts.web.terminal"],
        },
    },
]

# --- Storage -------------------------------------------------------------------------------
DATA_DIR = Path(env_str("BOLTZ_DATA_DIR", str(BASE_DIR / ".data"))).resolve()
MEDIA_ROOT = DATA_DIR / "files"
MEDIA_URL = "/files/"
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where `collectstatic` writes the hashed, gzipped copies WhiteNoise serves (a shared volume, or
# a test's own folder).
STATIC_ROOT = Path(env_str("BOLTZ_STATIC_ROOT", str(DATA_DIR / "static"))).resolve()
STORAGES = {
    # Raw outputs, diffs, workspaces and uploads: MEDIA_ROOT, or an S3-compatible bucket shared
    # by the web process and every worker host with BOLTZ_STORAGE=s3 (boltz_web/file_storage.py).
    "default": default_storage_settings(os.environ),
    # `manage.py collectstatic` (make demo runs it) writes hashed, gzipped copies to STATIC_ROOT.
    "staticfiles": {"BACKEND": "boltz_web.static_storage.StaticStorage"},
}
# Without a collectstatic (a fresh checkout, the tests), WhiteNoise serves static/ as it is.
WHITENOISE_USE_FINDERS = True

# --- Database: SQLite by default, anything dj-database-url knows through DATABASE_URL --------
_database_url = env_str("DATABASE_URL", "")
if _database_url:
    try:
        DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60)}
    except Exception as exc:  # noqa: BLE001 - dj-database-url raises several kinds
        raise ImproperlyConfigured(f"DATABASE_URL could not be parsed: {exc}") from None
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # Django's, storing text with NUL characters instead of failing on it.
        DATABASES["default"]["ENGINE"] = "boltz_web.postgresql"
else:
    _sqlite_path = Path(env_str("BOLTZ_SQLITE_PATH", str(DATA_DIR / "boltz.sqlite3")))
    DATABASES = {
        "default": {
            # Django's SQLite backend; the writers of a process take turns on a lock rather
            # than in SQLite's sleeping busy handler (boltz_web/sqlite/base.py).
            "ENGINE": "boltz_web.sqlite",
            "NAME": _sqlite_path,
            # A kept-alive API client's requests (one server thread) and each operations thread
            # reuse their connection instead of opening one per request.
            "CONN_MAX_AGE": 60,
            # The web process, the CLI and workers write to one file: WAL lets readers go on
            # while a writer writes, IMMEDIATE takes the write lock up front (no upgrade
            # deadlocks), and the timeout waits for it instead of failing at once.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": env_str("BOLTZ_TEST_SQLITE_PATH", str(DATA_DIR / "test.sqlite3"))},
        }
    }

if BOLTZ_ENV == "production":
    from boltz_web.production import refuse_unsafe_production

    refuse_unsafe_production(database_url=_database_url, debug=DEBUG)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
LOGIN_URL = "attempts:login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "attempts:login"
# Times with seconds, in the pages and the admin (boltz_web/formats/en/formats.py).
FORMAT_MODULE_PATH = ["boltz_web.formats"]

# One line per request (boltz_web/request_log.py) and per attempt stage (attempts/run/
# director.py), plain text by default; BOLTZ_LOG_FORMAT=json makes every line one JSON object
# (boltz_web/log_lines.py). Neither holds secrets nor what an agent wrote or printed.
BOLTZ_LOG_FORMAT = env_str("BOLTZ_LOG_FORMAT", "text").strip().lower()
if BOLTZ_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"BOLTZ_LOG_FORMAT={BOLTZ_LOG_FORMAT!r}: expected text or json")
_LOG_LEVEL = env_str("BOLTZ_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"boltz": {"()": "boltz_web.log_lines.LineFormatter", "kind": BOLTZ_LOG_FORMAT}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "boltz"}},
    "loggers": {
        "attempts": {"handlers": ["console"], "level": _LOG_LEVEL},
        "boltz_web": {"handlers": ["console"], "level": _LOG_LEVEL},
        # A worker's own lines ("... ready.", tasks received, failures), in the same format.
        "celery": {"handlers": ["console"], "level": "INFO"},
    },
}

# --- Celery ----------------------------------------------------------------------------------
# Celery's broker, and the channel of the API's operation calls (attempts/dispatch/calls.py).
BOLTZ_REDIS_URL = env_str("BOLTZ_REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = BOLTZ_REDIS_URL
# No task's result is kept: the API's operations on live sandboxes answer through opcalls.
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False  # a lost worker's attempt is marked by the reaper
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The longest a command to Redis may take (connecting, or waiting for its answer) before Redis is
# taken as unreachable: a request that needs it then answers 503 within a few seconds instead of
# hanging on a Redis that accepts connections but never answers.
BOLTZ_REDIS_TIMEOUT = env_seconds("BOLTZ_REDIS_TIMEOUT", "3")
if not BOLTZ_REDIS_TIMEOUT > 0:
    raise ImproperlyConfigured("BOLTZ_REDIS_TIMEOUT must be a duration above 0 (e.g. 3s)")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Longer than any attempt, or Redis would hand a running attempt to a second worker.
    "visibility_timeout": env_int("BOLTZ_VISIBILITY_TIMEOUT", 43200),
    "socket_timeout": BOLTZ_REDIS_TIMEOUT,
    "socket_connect_timeout": BOLTZ_REDIS_TIMEOUT,
    # A send connects once, where kombu would otherwise go on retrying for its connection
    # timeout; a worker's own reconnecting is set apart (broker_connection_max_retries).
    "max_retries": 0,
}
CELERY_BROKER_CONNECTION_TIMEOUT = BOLTZ_REDIS_TIMEOUT
# No second try by Celery: a connection broken by a Redis restart is made again anyway, and a
# retry on a hanging Redis would wait its timeout two or three times over.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 0}
CELERY_TASK_DEFAULT_QUEUE = env_str("BOLTZ_QUEUE", "boltz")
# Workers tell the broker when a task is sent, starts and ends, so that Celery's own monitor
# (Flower, docs/DEPLOY.md) lists tasks as well as workers. A few bytes per task on Redis.
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("BOLTZ_TASK_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = CELERY_WORKER_SEND_TASK_EVENTS

# --- Boltz -----------------------------------------------------------------------------------
BOLTZ_HOST = env_str("BOLTZ_HOST", socket.gethostname())
# Attempts that may run on any host wait here; operations on a live sandbox go to
# the queue of the host that owns it: f"{BOLTZ_QUEUE}.host.{host}".
BOLTZ_QUEUE = CELERY_TASK_DEFAULT_QUEUE
BOLTZ_MAX_SANDBOXES = env_int("BOLTZ_MAX_SANDBOXES", 2, minimum=1)
BOLTZ_DEFAULT_IMAGE = env_str("BOLTZ_DEFAULT_IMAGE", "boltz-sandbox:bookworm")
BOLTZ_DEBIAN_MIRROR = env_str("BOLTZ_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BOLTZ_OUTPUT_HEAD_BYTES = env_bytes("BOLTZ_OUTPUT_HEAD_BYTES", "32k")
BOLTZ_OUTPUT_TAIL_BYTES = env_bytes("BOLTZ_OUTPUT_TAIL_BYTES", "32k")
BOLTZ_MAX_RAW_OUTPUT_BYTES = env_bytes("BOLTZ_MAX_RAW_OUTPUT_BYTES", "256m")
# Raw output kept per attempt, all its commands together (their heads and tails always are).
BOLTZ_RAW_OUTPUT_BUDGET = env_bytes("BOLTZ_RAW_OUTPUT_BUDGET", "512m")
# What one sandbox may write (its writable layer: /workspace, /tmp, everywhere), enforced by
# Docker (`--storage-opt size`) where its storage driver can; a task may set its own. 0: none.
BOLTZ_DISK_LIMIT = env_bytes("BOLTZ_DISK_LIMIT", "2g")
# The OCI runtime sandboxes run under: Docker's default (runc) when empty; "runsc" for
# gVisor, a kernel of its own between the agent and the host's (docs/RELIABILITY.md).
BOLTZ_RUNTIME = env_str("BOLTZ_RUNTIME", "")
BOLTZ_MAX_DIFF_BYTES = env_bytes("BOLTZ_MAX_DIFF_BYTES", "32m")
# How long the agent's changes (and what a separate verifier is handed) are read for code that
# reaches into the test runner; what is not read by then is named as too long to read.
BOLTZ_SCAN_SECONDS = env_seconds("BOLTZ_SCAN_SECONDS", "120")
BOLTZ_DOCKER_RETRIES = env_int("BOLTZ_DOCKER_RETRIES", 3, minimum=0)
BOLTZ_DOCKER_RETRY_DELAY = env_seconds("BOLTZ_DOCKER_RETRY_DELAY", "10")
BOLTZ_SANDBOX_RETENTION = env_seconds("BOLTZ_SANDBOX_RETENTION", "7d")
BOLTZ_REPO_CACHE = DATA_DIR / "repos"
# Names this installation's containers (and labels them), so a test run and a demo on the same
# Docker host never touch each other's sandboxes.
# The default is named after the data folder: two checkouts on one Docker host never share it.
BOLTZ_INSTANCE = env_str(
    "BOLTZ_INSTANCE", "boltz-" + hashlib.sha256(str(DATA_DIR).encode()).hexdigest()[:8]
)
# Django's cache, shared by every web process through Redis (the sign-in counts): a cache in
# each process's memory would count apart in each of gunicorn's workers. A Redis that does not
# answer is given up on after 2 s.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": BOLTZ_REDIS_URL,
        "KEY_PREFIX": BOLTZ_INSTANCE,
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}
BOLTZ_SANDBOX_NETWORK = env_str("BOLTZ_SANDBOX_NETWORK", "bridge")
# Tasks that ask for network (Harbor's default) run only where this is on; else they are
# refused with that reason.
BOLTZ_ALLOW_NETWORK_TASKS = env_bool("BOLTZ_ALLOW_NETWORK_TASKS", False)
# Base images of task Dockerfiles mapped to local ones, `FROM=LOCAL,...` (`*`: any other base).
BOLTZ_BASE_IMAGES = env_str("BOLTZ_BASE_IMAGES", "")
# The local stand-in for the registry images Harbor tasks start from (python:3.12-slim, ...):
# the default image's Debian with neither its user nor its working folder (`build_image`).
BOLTZ_STANDIN_IMAGE = env_str("BOLTZ_STANDIN_IMAGE", "boltz-base:bookworm")
CELERY_WORKER_CONCURRENCY = BOLTZ_MAX_SANDBOXES
# A running attempt whose worker process has given no sign of life for this long is lost: it
# ends as an infrastructure error, its container goes and its slot is free again.
BOLTZ_LOST_AFTER = env_seconds("BOLTZ_LOST_AFTER", "45")
# Room past an attempt's own stage limits before the reaper calls its worker lost.
BOLTZ_DEADLINE_MARGIN = env_seconds("BOLTZ_DEADLINE_MARGIN", "300")
# Attempts are kept forever unless this is set (e.g. 90d).
BOLTZ_ATTEMPT_RETENTION = (
    env_seconds("BOLTZ_ATTEMPT_RETENTION", "0") if env_str("BOLTZ_ATTEMPT_RETENTION", "") else None
)
BOLTZ_RETENTION_INTERVAL = env_seconds("BOLTZ_RETENTION_INTERVAL", "1h")
BOLTZ_MAX_WORKSPACE_BYTES = env_bytes("BOLTZ_MAX_WORKSPACE_BYTES", "256m")
# The agent's /workspace is read out of its sandbox to record its changes: past these, the
# changes are unavailable (and the attempt fails with that reason).
BOLTZ_MAX_TREE_BYTES = env_bytes("BOLTZ_MAX_TREE_BYTES", "2g")
BOLTZ_MAX_TREE_FILES = env_int("BOLTZ_MAX_TREE_FILES", 300000, minimum=1)
# API sandboxes: the largest file or archive read or written at once, the longest and the
# default lives, the idle time before one is closed, and how many operations a host serves at
# once (its ops worker's threads).
BOLTZ_MAX_FILE_BYTES = env_bytes("BOLTZ_MAX_FILE_BYTES", "64m")
BOLTZ_SANDBOX_MAX_TTL = env_seconds("BOLTZ_SANDBOX_MAX_TTL", "24h")
BOLTZ_SANDBOX_DEFAULT_TTL = env_seconds("BOLTZ_SANDBOX_DEFAULT_TTL", "1h")
BOLTZ_SANDBOX_IDLE_TIMEOUT = env_seconds("BOLTZ_SANDBOX_IDLE_TIMEOUT", "30m")
BOLTZ_OPS_CONCURRENCY = env_int("BOLTZ_OPS_CONCURRENCY", 8, minimum=1)
# A file written through the API arrives whole in the request's body. Any body over its limit
# (the API's: this; a page form's: BOLTZ_MAX_UPLOAD_BYTES + 1 MiB) is refused with 413 before
# it is read (boltz_web/request_limits.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = BOLTZ_MAX_FILE_BYTES + 1024 * 1024
CELERY_BEAT_SCHEDULE = {
    "boltz-retention-and-reaper": {
        "task": "boltz.apply_retention",
        "schedule": BOLTZ_RETENTION_INTERVAL,
        "options": {"queue": BOLTZ_QUEUE},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
BOLTZ_MAX_UPLOAD_BYTES = env_bytes("BOLTZ_MAX_UPLOAD_BYTES", "256m")
# Callbacks go only to public internet addresses; these host names and networks (comma
# separated: hooks.internal, 10.1.0.0/16, 127.0.0.1) may receive them too.
BOLTZ_CALLBACK_ALLOW = env_hosts_and_networks("BOLTZ_CALLBACK_ALLOW", "")
# Every archive Boltz unpacks (task uploads and imports, an API sandbox's archive) is read entry
# by entry and refused past any of these: its files' bytes together, its entries (files,
# folders, links), and what its stream expands to over its own size (attempts/taskio/archives.py).
BOLTZ_MAX_UNPACKED_BYTES = env_bytes("BOLTZ_MAX_UNPACKED_BYTES", "1g")
BOLTZ_MAX_ARCHIVE_FILES = env_int("BOLTZ_MAX_ARCHIVE_FILES", 100000, minimum=1)
BOLTZ_MAX_ARCHIVE_RATIO = env_int("BOLTZ_MAX_ARCHIVE_RATIO", 200, minimum=1)
# Where SWE-bench imports find local clones of their repositories (owner__name folders).
BOLTZ_SWEBENCH_REPOS = env_str("BOLTZ_SWEBENCH_REPOS", "")

"""The Celery app. Workers run with: celery -A boltz_web worker (see `make worker`)."""

import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "boltz_web.settings")

app = Celery("boltz")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The tasks live on the worker side (attempts.run); the web process sends them by name only.
app.conf.imports = ("attempts.run.celery_tasks",)


@setup_logging.connect
def _boltz_log_lines(**_kwargs) -> None:
    """A worker logs as the web process does (settings.LOGGING: Boltz's line format, JSON with
    BOLTZ_LOG_FORMAT=json), Celery's own lines included. Left to itself, Celery puts a handler
    of its own on the root logger, and every Boltz line came out twice, once in each format."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)

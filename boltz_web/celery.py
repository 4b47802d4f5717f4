"""The Celery app. Workers run with: celery -A boltz_web worker (see `make worker`)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "boltz_web.settings")

app = Celery("boltz")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The tasks live on the worker side (attempts.run); the web process sends them by name only.
app.conf.imports = ("attempts.run.celery_tasks",)

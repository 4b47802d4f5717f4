"""The Celery app. Workers run with: celery -A boltz_web worker (see `make worker`)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "boltz_web.settings")

app = Celery("boltz")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

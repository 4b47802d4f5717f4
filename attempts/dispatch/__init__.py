"""From the web process to the workers: queueing Celery tasks, operation calls to the worker
that owns a live sandbox, the hosts that are alive, and the time limits work is sent with."""

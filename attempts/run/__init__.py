"""The worker side: the attempt director and its stages over one sandbox session (record, check,
scoring), operations on live sandboxes, Celery tasks, and the Docker runtime under docker/.
Only worker processes import this package; tests/test_architecture.py keeps the web side out."""

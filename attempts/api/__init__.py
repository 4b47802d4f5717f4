"""The HTTP API under /api/ (django-ninja): thin handlers; domain errors become HTTP answers."""

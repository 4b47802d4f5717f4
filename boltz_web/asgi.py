import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "boltz_web.settings")
# The web process holds no Docker socket: it never imports the worker side (attempts.run), so
# nothing in it can ask Docker (tests/test_architecture.py, tests/test_web_process.py).
application = get_asgi_application()

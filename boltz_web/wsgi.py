import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "boltz_web.settings")
# The web process holds no Docker socket: it never imports the worker side (attempts.run), so
# nothing in it can ask Docker (tests/test_architecture.py, tests/test_web_process.py).
application = get_wsgi_application()

from boltz_web.serving import no_delay  # noqa: E402 - after Django is set up

no_delay()

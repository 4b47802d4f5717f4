import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "boltz_web.settings")
# The web process holds no Docker socket: it never imports docker or the runner (only workers
# do), and it asks the worker hosts' reports, not Docker, which images exist.
os.environ["BOLTZ_ROLE"] = "web"
application = get_wsgi_application()

from boltz_web.serving import no_delay  # noqa: E402 - after Django is set up

no_delay()

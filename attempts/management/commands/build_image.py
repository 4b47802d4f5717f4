from django.core.management.base import BaseCommand, CommandError

from attempts.core.errors import InfrastructureError
from attempts.run.docker.sandbox_image import build_default_image


class Command(BaseCommand):
    help = "Build the default sandbox image (debootstrap + docker import); no registry needed."

    def add_arguments(self, parser):
        parser.add_argument("--name", help="image name (default: BOLTZ_DEFAULT_IMAGE)")
        parser.add_argument("--force", action="store_true", help="rebuild even if present")
        parser.add_argument("--mirror", help="Debian mirror (default: BOLTZ_DEBIAN_MIRROR)")

    def handle(self, *args, name=None, force=False, mirror=None, **options):
        try:
            build_default_image(
                name, force=force, mirror=mirror, progress=lambda line: self.stdout.write(line)
            )
        except (RuntimeError, InfrastructureError) as exc:
            raise CommandError(str(exc)) from exc

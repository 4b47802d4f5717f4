from django.core.management.base import BaseCommand, CommandError

from attempts.core.errors import InfrastructureError
from attempts.run.docker.sandbox_image import build_default_image, build_standin_image


class Command(BaseCommand):
    help = (
        "Build the default sandbox image (debootstrap + docker import) and from it the stand-in "
        "for registry base images (BOLTZ_STANDIN_IMAGE); no registry needed."
    )

    def add_arguments(self, parser):
        parser.add_argument("--name", help="image name (default: BOLTZ_DEFAULT_IMAGE)")
        parser.add_argument("--force", action="store_true", help="rebuild even if present")
        parser.add_argument("--mirror", help="Debian mirror (default: BOLTZ_DEBIAN_MIRROR)")

    def handle(self, *args, name=None, force=False, mirror=None, **options):
        try:
            built = build_default_image(
                name, force=force, mirror=mirror, progress=lambda line: self.stdout.write(line)
            )
            if name is None:
                build_standin_image(force=force or built, progress=self.stdout.write)
        except (RuntimeError, InfrastructureError) as exc:
            raise CommandError(str(exc)) from exc

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from attempts.core.errors import TaskInvalid
from attempts.run.image_builds import use_this_hosts_docker
from attempts.taskio.importers import import_path


class Command(BaseCommand):
    help = (
        "Import tasks: a Boltz task directory, a Harbor / Terminal-Bench task directory, a "
        "folder or zip of several, or a SWE-bench style JSONL file. Importing again updates; "
        "it never duplicates. Dockerfiles of tasks are built here, on this Docker host."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--repos",
            type=Path,
            help="SWE-bench: folder of local clones "
            "(owner__name, owner/name or name, clones or bare repositories, with or without "
            ".git at the end); default BOLTZ_SWEBENCH_REPOS",
        )
        parser.add_argument(
            "--image",
            default="",
            help="the image every imported task runs in, in place of its own (its image "
            "name or its Dockerfile); SWE-bench rows without one default to "
            f"{settings.BOLTZ_DEFAULT_IMAGE}",
        )
        parser.add_argument(
            "--base-image",
            action="append",
            default=[],
            metavar="FROM=LOCAL",
            help="build task Dockerfiles with FROM FROM mapped to the local image LOCAL "
            "(repeatable; FROM `*` maps every other base); over BOLTZ_BASE_IMAGES",
        )
        parser.add_argument(
            "--test-cmd",
            default="",
            help="SWE-bench: the check command; {files} becomes the test files the row names",
        )

    def handle(self, *args, path, repos, image, test_cmd, base_image, **options):
        use_this_hosts_docker()  # a command on a Docker host: imports may use it
        if not path.exists():
            raise CommandError(f"{path} does not exist")

        def progress(line: str) -> None:  # a build's lines, as they come
            self.stdout.write(f"  build: {line}")

        try:
            report = import_path(
                path,
                repos_dir=repos,
                image=image,
                test_cmd=test_cmd,
                build=True,
                base_images=base_image,
                progress=progress,
            )
        except TaskInvalid as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from None
        for line in report.lines():
            self.stdout.write(line)
        if report.refused and not (report.created or report.updated):
            raise CommandError("nothing was imported")

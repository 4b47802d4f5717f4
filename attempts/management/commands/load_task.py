from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from attempts.core.errors import InfrastructureError, TaskInvalid
from attempts.run.image_builds import use_this_hosts_docker
from attempts.taskio.folders import load_task_dir


class Command(BaseCommand):
    help = "Load (create or update) tasks from task directories (folders with task.toml)."

    def add_arguments(self, parser):
        parser.add_argument("directories", nargs="+", type=Path)

    def handle(self, *args, directories, **options):
        use_this_hosts_docker()  # a command on a Docker host: imports may use it
        failed = 0
        for directory in directories:
            try:
                task, created = load_task_dir(
                    directory, build=True, progress=lambda line: self.stdout.write(f"  {line}")
                )
            except TaskInvalid as exc:
                failed += 1
                self.stderr.write(f"{directory}: refused: {exc.field}: {exc.message}")
                continue
            except InfrastructureError as exc:
                failed += 1
                self.stderr.write(f"{directory}: could not check the task: {exc.reason}")
                continue
            verb = "created" if created else "updated"
            self.stdout.write(
                f"{verb} task {task.slug} ({task.repo_url} at {task.base_ref} = "
                f"{task.base_commit[:12]}, image {task.image_name}, "
                f"{len(task.check_file_paths)} hidden check files)"
            )
        if failed:
            raise CommandError(f"{failed} of {len(directories)} task directories refused")

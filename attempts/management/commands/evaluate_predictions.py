import json
import os
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from attempts.core.errors import TaskInvalid
from attempts.run.image_builds import use_this_hosts_docker
from attempts.services.predictions import (
    evaluation_refresh,
    evaluation_start,
    instance_report_paths,
    progress,
    report_filename,
    report_table,
    with_base_url,
)


class Command(BaseCommand):
    help = (
        "Evaluate SWE-bench predictions (instance_id, model_name_or_path, model_patch; JSONL or "
        "JSON): import the dataset rows they name, run one attempt per prediction with the "
        "patch agent, wait, and write the report in the harness's format "
        "({model}.{run_id}.json)."
    )

    def add_arguments(self, parser):
        parser.add_argument("predictions", type=Path, help="predictions file (.jsonl or .json)")
        parser.add_argument(
            "--dataset", type=Path, required=True, help="SWE-bench rows (JSONL or a JSON list)"
        )
        parser.add_argument(
            "--repos",
            type=Path,
            help="folder of local clones (as for import_tasks); default BOLTZ_SWEBENCH_REPOS",
        )
        parser.add_argument("--image", default="", help="the image (default: the default one)")
        parser.add_argument("--run-id", default="", help="the run's name (default: run-DATE)")
        parser.add_argument(
            "--report-dir", type=Path, default=Path("."), help="where the report goes (.)"
        )
        parser.add_argument(
            "--url",
            default=os.environ.get("BOLTZ_URL", "http://127.0.0.1:8000"),
            help="the dashboard's address, for the links (default BOLTZ_URL or "
            "http://127.0.0.1:8000)",
        )

    def handle(self, *args, predictions, dataset, repos, image, run_id, report_dir, url, **opts):
        use_this_hosts_docker()  # a command on a Docker host: imports may use it
        for option, path in (("predictions", predictions), ("--dataset", dataset)):
            if not path.is_file():
                raise CommandError(f"{option} {path}: not a file")
        try:
            started = evaluation_start(
                predictions=predictions.read_text(encoding="utf-8", errors="replace"),
                dataset=dataset.read_text(encoding="utf-8", errors="replace"),
                run_id=run_id,
                image=image,
                repos_dir=repos,
                source=predictions.name,
            )
        except TaskInvalid as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from None
        evaluation = started.evaluation
        base = url.rstrip("/")
        for note in started.notes:
            self.stdout.write(note)
        for refusal in evaluation.refused:
            self.stdout.write(
                f"refused {predictions.name} line {refusal['line']}: {refusal['reason']}"
            )
        done, total = progress(evaluation)
        self.stdout.write(
            f"run {evaluation.run_id}: {len(evaluation.items)} prediction(s), {total} attempt(s) "
            f"queued; {base}{evaluation.get_absolute_url()}"
        )
        with tqdm(
            total=total, desc=evaluation.run_id, unit="attempt", file=self.stderr._out
        ) as bar:
            while True:
                now_done, _ = progress(evaluation)
                bar.update(now_done - bar.n)
                evaluation = evaluation_refresh(evaluation)  # builds the report once all ended
                if evaluation.state == evaluation.State.FINISHED:
                    break
                time.sleep(0.5)
        report = with_base_url(evaluation.report, base)
        report_dir.mkdir(parents=True, exist_ok=True)
        target = report_dir / report_filename(evaluation)
        target.write_text(json.dumps(report, indent=4) + "\n")
        for path, content in instance_report_paths(report).values():
            (report_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (report_dir / path).write_text(json.dumps(content, indent=4) + "\n")
        self.stdout.write(report_table(report))
        self.stdout.write(f"Report written to {target}")

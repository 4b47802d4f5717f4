"""One attempt's sandbox lifecycle through Boltz against the same work in plain Docker SDK calls.

    .venv/bin/python bench/sandbox.py [-n 10] [--write docs/PERFORMANCE.md]

Boltz: the runner in-process (no queue) on the fix-add example with the reference agent:
container with the sandbox rules, repository copied in, agent command, every agent process
ended, the tree read out and diffed on the worker, workspace snapshot, protected paths reset,
hidden files restored, check, container stopped, every step in the timeline; once with the
check in a fresh container (the default) and once in place. Raw: docker-py doing the container
part only (create with the same limits, copy the same workspace tar in, start, run the patch
and the check, stop), once in the same container and once with the check in a second one.
Also: what building the sandbox's clean history (base and ancestors only) costs against a
plain clone, on this repository's own history.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _setup import ROOT, create_raw_container, django_in_scratch, machine, timed, timing_table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--write")
    args = parser.parse_args()
    django_in_scratch("sandbox")
    import docker
    from django.conf import settings
    from pages import write_section

    from attempts.models import Attempt
    from attempts.run.director import run_attempt
    from attempts.run.docker import runtime
    from attempts.services.attempts import attempt_create
    from attempts.taskio import repos
    from attempts.taskio.folders import load_task_dir

    task, _ = load_task_dir(ROOT / "examples" / "fix-add")
    settings.CELERY_TASK_ALWAYS_EAGER = False
    stages: dict[str, list[dict]] = {"fresh": [], "in_place": []}

    def boltz_once(mode: str = "fresh"):
        # Created without enqueueing (no worker here): then run as the worker would.
        from unittest import mock

        task.check_mode = mode
        task.save(update_fields=["check_mode"])
        with mock.patch("attempts.services.attempts.attempts_enqueue"):
            attempt = attempt_create(task=task, agent="reference")
        run_attempt(attempt.pk, host=settings.BOLTZ_HOST)
        attempt.refresh_from_db()
        assert attempt.outcome == "passed", attempt.failure_reason
        stages[mode].append(attempt.timings)
        runtime.remove_container(attempt.container_id)

    client = docker.from_env()
    scratch = Path(tempfile.mkdtemp())
    archive = repos.workspace_archive(task.repo_url, task.base_commit, scratch / "ws.tar")
    workspace = archive.read_bytes()
    patch = task.reference_patch

    def raw_container():
        return create_raw_container(client, task, label="raw")

    def raw_check(container):
        container.put_archive("/", bytes(task.check_files))
        result = container.exec_run(["sh", "-c", task.check_command], user="1000:1000")
        assert result.exit_code == 0, result.output

    def raw_once(fresh: bool = False):
        container = raw_container()
        second = None
        try:
            container.put_archive("/", workspace)
            container.start()
            container.exec_run(
                ["sh", "-c", "printf '%s' \"$P\" | git apply"],
                environment={"P": patch},
                user="1000:1000",
            )
            if fresh:  # the check in a second container: the same files copied over
                container.stop(timeout=0)
                second = raw_container()
                second.put_archive("/", b"".join(container.get_archive("/workspace")[0]))
                second.start()
                raw_check(second)
            else:
                raw_check(container)
            container.stop(timeout=2)
        finally:
            container.remove(force=True)
            if second is not None:
                second.remove(force=True)

    boltz_once(), raw_once()  # warm: image layers, git cache
    rows = {
        "Boltz, check in a fresh container (default)": timed(boltz_once, args.n),
        "Boltz, check in place": timed(lambda: boltz_once("in_place"), args.n),
        "raw Docker SDK, check in a second container": timed(lambda: raw_once(True), args.n),
        "raw Docker SDK, check in the same container": timed(raw_once, args.n),
    }
    fresh_t, place_t, raw_fresh, raw_t = rows.values()
    ratio = fresh_t["median_ms"] / raw_fresh["median_ms"]
    ratio_place = place_t["median_ms"] / raw_t["median_ms"]

    def stage(mode: str, name: str) -> float:
        return 1000 * statistics.median(t[name] for t in stages[mode][-args.n :])

    history = clean_history_cost(repos, args.n)
    table = timing_table(rows)
    print(f"ratios: fresh x{ratio:.2f}, in place x{ratio_place:.2f}; history: {history}")
    print(f"events per attempt: {Attempt.objects.last().events.count()}")
    if args.write:
        body = table + (
            f"\nRatios against the raw path doing the same container work: ×{ratio:.2f} with "
            f"the check in a fresh container, ×{ratio_place:.2f} in place. Boltz's stages "
            "(median): recording the changes (every agent process ended, the tree read out "
            f"and diffed on the worker, the checked tree built, the final files kept) "
            f"{stage('fresh', 'record'):.0f} ms; the check {stage('fresh', 'check'):.0f} ms "
            f"in a fresh container against {stage('in_place', 'check'):.0f} ms in place. "
            f"`python bench/sandbox.py -n {args.n}` on {machine()}, Docker Engine with "
            "--bridge=none. Boltz does more than the raw path: every step in the timeline, "
            "the diff on the worker, the final files kept, protected paths reset and the "
            "check's reports read.\n\n"
            "Building a sandbox's clean history (the base and its ancestors only, once per "
            f"base and host, then cached) on this repository's own history: {history}."
        )
        write_section(args.write, "Attempt lifecycle against plain Docker", body)


def clean_history_cost(repos, n: int) -> str:
    """Build the clean base repository and workspace archive of this repository's HEAD~1 from
    scratch, against the plain full clone the workspace was made of before."""
    import shutil
    import subprocess

    from django.conf import settings

    commit = repos.git("rev-parse", "HEAD~1", cwd=ROOT).strip()
    objects = repos.git("rev-list", "--all", "--objects", cwd=ROOT).count("\n")
    repos.ensure_mirror(str(ROOT))

    def clean():
        shutil.rmtree(settings.BOLTZ_REPO_CACHE / "bases", ignore_errors=True)
        shutil.rmtree(settings.BOLTZ_REPO_CACHE / "workspaces", ignore_errors=True)
        repos.cached_workspace_archive(str(ROOT), commit)

    def plain():
        with tempfile.TemporaryDirectory() as scratch:
            subprocess.run(
                [
                    "git",
                    "clone",
                    "-q",
                    "--no-checkout",
                    "--no-hardlinks",
                    str(repos.mirror_path(str(ROOT))),
                    f"{scratch}/w",
                ],
                check=True,
            )
            subprocess.run(["git", "-C", f"{scratch}/w", "checkout", "-q", commit], check=True)
            subprocess.run(["tar", "-cf", f"{scratch}/w.tar", "-C", scratch, "w"], check=True)

    clean_t, plain_t = timed(clean, n), timed(plain, n)
    return (
        f"{clean_t['median_ms']:.0f} ms against {plain_t['median_ms']:.0f} ms for a plain "
        f"clone, checkout and tar (×{clean_t['median_ms'] / plain_t['median_ms']:.2f}; "
        f"{objects} objects)"
    )


if __name__ == "__main__":
    main()

"""One attempt's sandbox lifecycle through Boltz against the same work in plain Docker SDK calls.

    .venv/bin/python bench/sandbox.py [-n 10] [--write docs/PERFORMANCE.md]

Boltz: the runner in-process (no queue) on the fix-add example with the reference agent:
container with the sandbox rules, repository copied in, agent command, diff, workspace
snapshot, agent processes ended, hidden files restored, check, container stopped, every
step in the timeline. Raw: docker-py doing the container part only (create with the same
limits, copy the same workspace tar in, start, run the patch and the check, stop).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _setup import ROOT, django_in_scratch, machine, timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--write")
    args = parser.parse_args()
    django_in_scratch("sandbox")
    import docker
    from django.conf import settings
    from pages import write_section

    from attempts import repos
    from attempts.models import Attempt
    from attempts.runner import run_attempt
    from attempts.sandbox import runtime
    from attempts.services import attempt_create
    from attempts.taskdirs import load_task_dir

    task, _ = load_task_dir(ROOT / "examples" / "fix-add")
    settings.CELERY_TASK_ALWAYS_EAGER = False

    def boltz_once():
        # Created without enqueueing (no worker here): then run as the worker would.
        from unittest import mock

        with mock.patch("attempts.services.attempt_enqueue"):
            attempt = attempt_create(task=task, agent="reference")
        run_attempt(attempt.pk, host=settings.BOLTZ_HOST)
        attempt.refresh_from_db()
        assert attempt.outcome == "passed", attempt.failure_reason
        runtime.remove_container(attempt.container_id)

    client = docker.from_env()
    scratch = Path(tempfile.mkdtemp())
    archive = repos.workspace_archive(task.repo_url, task.base_commit, scratch / "ws.tar")
    workspace = archive.read_bytes()
    patch = task.reference_patch

    def raw_once():
        container = client.containers.create(
            task.image_name,
            ["sleep", "infinity"],
            user="1000:1000",
            working_dir="/workspace",
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=task.memory_bytes,
            memswap_limit=task.memory_bytes,
            nano_cpus=int(task.cpus * 1e9),
            pids_limit=task.pids_limit,
            init=True,
            labels={"boltz.bench": "raw"},
        )
        try:
            container.put_archive("/", workspace)
            container.start()
            container.exec_run(
                ["sh", "-c", "printf '%s' \"$P\" | git apply"], environment={"P": patch}
            )
            container.put_archive("/", bytes(task.check_files))
            result = container.exec_run(["sh", "-c", task.check_command])
            assert result.exit_code == 0, result.output
            container.stop(timeout=2)
        finally:
            container.remove(force=True)

    boltz_once(), raw_once()  # warm: image layers, git cache
    boltz_t, raw_t = timed(boltz_once, args.n), timed(raw_once, args.n)
    ratio = boltz_t["median_ms"] / raw_t["median_ms"]
    print(
        f"Boltz attempt: {boltz_t['median_ms']:.0f} ms median; raw Docker SDK: "
        f"{raw_t['median_ms']:.0f} ms; ratio x{ratio:.2f}"
    )
    print(f"events per attempt: {Attempt.objects.last().events.count()}")
    if args.write:
        body = (
            "| path | median | min | max |\n| --- | ---: | ---: | ---: |\n"
            f"| Boltz runner, reference agent on fix-add | {boltz_t['median_ms']:.0f} ms | "
            f"{boltz_t['min_ms']:.0f} ms | {boltz_t['max_ms']:.0f} ms |\n"
            f"| raw Docker SDK, same container work | {raw_t['median_ms']:.0f} ms | "
            f"{raw_t['min_ms']:.0f} ms | {raw_t['max_ms']:.0f} ms |\n\n"
            f"Ratio: ×{ratio:.2f}. `python bench/sandbox.py -n {args.n}` on {machine()}, "
            "Docker Engine with --bridge=none. Boltz does more than the raw path: it clones "
            "the repository from its cache into a fresh archive, records every step in the "
            "timeline, computes the diff with its own index, keeps the final files, ends every "
            "agent process (a container restart) before restoring the hidden files, and reads "
            "the check's reports."
        )
        write_section(args.write, "Attempt lifecycle against plain Docker", body)


if __name__ == "__main__":
    main()

"""The cost of gVisor (BOLTZ_RUNTIME=runsc) against Docker's default runtime (runc), for one
attempt's sandbox lifecycle through Boltz and for the same container work in plain Docker SDK
calls, all in one run.

    .venv/bin/python bench/isolation.py [-n 5] [--write docs/PERFORMANCE.md]

Boltz: the runner in-process (no queue) on the fix-add example with the reference agent, the
check in a fresh container (as bench/sandbox.py). Raw: docker-py creating a container with the
same limits, copying the workspace in, starting it, applying the patch and running the check
in it, then removing it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _setup import ROOT, create_raw_container, django_in_scratch, machine, timed, timing_table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--write")
    args = parser.parse_args()
    django_in_scratch("isolation")
    from unittest import mock

    import docker
    from django.conf import settings
    from pages import write_section

    from attempts.run.director import run_attempt
    from attempts.run.docker import runtime
    from attempts.services.attempts import attempt_create
    from attempts.taskio import repos
    from attempts.taskio.folders import load_task_dir

    refusal = runtime.runtime_refusal("runsc")
    if refusal:
        raise SystemExit(f"bench/isolation.py: {refusal}")
    task, _ = load_task_dir(ROOT / "examples" / "fix-add")
    client = docker.from_env()
    archive = repos.workspace_archive(
        task.repo_url, task.base_commit, Path(tempfile.mkdtemp()) / "ws.tar"
    )
    workspace = archive.read_bytes()

    def boltz_once(name: str):
        settings.BOLTZ_RUNTIME = name
        with mock.patch("attempts.services.attempts.attempts_enqueue"):
            attempt = attempt_create(task=task, agent="reference")
        run_attempt(attempt.pk, host=settings.BOLTZ_HOST)
        attempt.refresh_from_db()
        assert attempt.outcome == "passed", attempt.failure_reason
        runtime.remove_container(attempt.container_id)

    def raw_once(name: str):
        container = create_raw_container(client, task, label="raw", runtime=name)
        try:
            container.put_archive("/", workspace)
            container.start()
            container.exec_run(
                ["sh", "-c", "printf '%s' \"$P\" | git apply"],
                environment={"P": task.reference_patch},
                user="1000:1000",
            )
            container.put_archive("/", bytes(task.check_files))
            result = container.exec_run(["sh", "-c", task.check_command], user="1000:1000")
            assert result.exit_code == 0, result.output
        finally:
            container.remove(force=True)

    for name in ("runc", "runsc"):  # warm: image layers, git cache, gVisor's first start
        boltz_once(name), raw_once(name)
    rows = {
        "Boltz, runc": timed(lambda: boltz_once("runc"), args.n),
        "Boltz, runsc (gVisor)": timed(lambda: boltz_once("runsc"), args.n),
        "raw Docker SDK, runc": timed(lambda: raw_once("runc"), args.n),
        "raw Docker SDK, runsc (gVisor)": timed(lambda: raw_once("runsc"), args.n),
    }
    boltz_runc, boltz_runsc, raw_runc, raw_runsc = (t["median_ms"] for t in rows.values())
    table = timing_table(rows)
    if args.write:
        body = table + (
            f"\ngVisor costs ×{boltz_runsc / boltz_runc:.2f} per attempt through Boltz "
            f"(+{boltz_runsc - boltz_runc:.0f} ms) and ×{raw_runsc / raw_runc:.2f} for the "
            f"same container work in plain Docker (+{raw_runsc - raw_runc:.0f} ms); Boltz "
            f"against raw: ×{boltz_runc / raw_runc:.2f} with runc, ×{boltz_runsc / raw_runsc:.2f} "
            f"with runsc. `python bench/isolation.py -n {args.n}` on {machine()}; gVisor "
            "from Debian's runsc package on its ptrace platform, with no network stack of its "
            "own and shared file access (scripts/services.sh)."
        )
        write_section(args.write, "Isolation: gVisor against runc", body)


if __name__ == "__main__":
    main()

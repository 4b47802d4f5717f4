"""Shared set-up for the benchmarks: a throwaway data folder and database, Django ready."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_in_scratch(instance: str) -> Path:
    data = Path(tempfile.mkdtemp(prefix=f"boltz-bench-{instance}-"))
    os.environ.update(
        {
            "BOLTZ_DATA_DIR": str(data),
            "BOLTZ_INSTANCE": f"boltz-bench-{instance}",
            "BOLTZ_HOST": "bench-host",
            "BOLTZ_ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
            "DJANGO_SETTINGS_MODULE": "boltz_web.settings",
        }
    )
    os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    # A benchmark runs on a Docker host, as `load_task` does: its imports may ask this Docker.
    from attempts.run.image_builds import use_this_hosts_docker

    use_this_hosts_docker()
    return data


def timed(fn, repeat: int) -> dict:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {
        "median_ms": statistics.median(samples) * 1000,
        "min_ms": min(samples) * 1000,
        "max_ms": max(samples) * 1000,
        "n": repeat,
    }


def timing_table(rows: dict[str, dict]) -> str:
    """Each path's median, min and max (from `timed`) as a Markdown table, printed too."""
    for name, t in rows.items():
        print(f"{name}: {t['median_ms']:.0f} ms median")
    return "| path | median | min | max |\n| --- | ---: | ---: | ---: |\n" + "".join(
        f"| {name} | {t['median_ms']:.0f} ms | {t['min_ms']:.0f} ms | {t['max_ms']:.0f} ms |\n"
        for name, t in rows.items()
    )


def machine() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def create_raw_container(client, task, *, label: str, runtime: str | None = None):
    """The raw baseline's container: docker-py with the same limits Boltz's sandboxes get (its
    disk limit too, where Docker here can hold it), under `runtime` (None: Docker's default)."""
    from attempts.run.docker.runtime import disk_limit_refusal

    disk = None if disk_limit_refusal() else {"size": str(task.disk_limit + 64 * 1024 * 1024)}
    return client.containers.create(
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
        storage_opt=disk,
        runtime=runtime,
        init=True,
        labels={"boltz.bench": label},
    )

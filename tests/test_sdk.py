"""The Python SDK installed on its own (httpx its only dependency) runs the worked example of
docs/SDK.md against a served instance: a real web server process, a real worker, real Docker."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from attempts.api.tokens import token_create
from attempts.models import Attempt, EventKind
from tests.conftest import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

# httpx and what it needs, copied from this environment: the test never downloads anything.
HTTPX_DEPENDENCIES = ("httpx", "httpcore", "h11", "anyio", "idna", "certifi", "typing_extensions")


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory) -> Path:
    """A fresh virtual environment holding the SDK (`pip install ./sdk`) and httpx only."""
    venv = tmp_path_factory.mktemp("sdk") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = Path(sysconfig.get_paths()["purelib"])
    for name in HTTPX_DEPENDENCIES:
        for found in [ours / name, ours / f"{name}.py", *ours.glob(f"{name}-*.dist-info")]:
            if found.exists():
                subprocess.run(["cp", "-r", str(found), str(site)], check=True)
    # `pip install ./sdk`, offline: the wheel is built here (no build dependencies to fetch)
    # and installed there with no index to reach.
    wheels = tmp_path_factory.mktemp("wheels")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            str(ROOT / "sdk"),
            "-w",
            str(wheels),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            *map(str, wheels.glob("*.whl")),
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    packages = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert packages - {"pip", "setuptools"} == {*HTTPX_DEPENDENCIES, "boltz_sdk"}
    return python


def test_the_worked_example_fixes_the_task_and_its_timeline_shows_each_call(
    web, worker, load_example, sdk_python, tmp_path
):
    load_example("fix-add")
    user = get_user_model().objects.create_user("sam")
    _row, token = token_create(user=user)
    run = subprocess.run(
        [str(sdk_python), str(ROOT / "examples" / "sdk_fix_add.py")],
        cwd=tmp_path,  # not the repository: `boltz` comes from the virtual environment
        env={"PATH": os.environ["PATH"], "BOLTZ_URL": web, "BOLTZ_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "+    return a + b" in run.stdout
    attempt = Attempt.objects.get(origin="api", owner=user)
    calls = []
    for event in attempt.events.order_by("seq"):
        data = event.data
        if event.kind == EventKind.EXEC and data.get("phase") == "start":
            calls.append(data["step"])
        elif event.kind == EventKind.FILE and data.get("action") in ("read", "write"):
            calls.append(data["action"])
    assert calls[:2] == ["exec", "read"] and "write" in calls
    write = calls.index("write")
    assert calls[write + 1] == "exec" and "check" in calls[write + 1 :]
    assert attempt.checks.filter(passed=True).exists()
    assert attempt.status == "finished"  # the `with` block closed it

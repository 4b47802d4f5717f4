"""Shared storage (BOLTZ_STORAGE=s3): the served web process and a worker, both on an S3-compatible
bucket (moto's server on 127.0.0.1, started here), keep an attempt's raw outputs, diff, workspace
and uploaded agent files in the bucket and nothing in the local folder; the pages, the API and the
export read them back from the bucket; deleting the attempt deletes its objects. And the setting
refuses what cannot work, naming the variable to fix."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from types import SimpleNamespace

import httpx
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from boltz_web.file_storage import LOCAL_BACKEND, S3_BACKEND, default_storage_settings
from tests.conftest import (
    ROOT,
    require,
    run_web,
    run_worker,
    stop_group,
    wait_finished,
    wait_until,
)

# --- the setting ---------------------------------------------------------------------------------

S3 = {"BOLTZ_STORAGE": "s3", "BOLTZ_S3_BUCKET": "boltz-files"}


def test_local_storage_is_the_default():
    assert default_storage_settings({}) == {"BACKEND": LOCAL_BACKEND}
    assert default_storage_settings({"BOLTZ_STORAGE": " Local "}) == {"BACKEND": LOCAL_BACKEND}


def test_s3_storage_takes_the_bucket_endpoint_region_and_prefix():
    found = default_storage_settings(
        {
            **S3,
            "BOLTZ_S3_ENDPOINT_URL": "http://minio.internal:9000/",
            "BOLTZ_S3_REGION": "eu-west-1",
            "BOLTZ_S3_PREFIX": "/team/boltz/",
            "AWS_ACCESS_KEY_ID": "id",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
    )
    assert found["BACKEND"] == S3_BACKEND
    options = found["OPTIONS"]
    assert options["bucket_name"] == "boltz-files"
    assert options["endpoint_url"] == "http://minio.internal:9000"
    assert options["region_name"] == "eu-west-1" and options["location"] == "team/boltz"
    assert options["addressing_style"] == "path"  # a self-hosted endpoint: no bucket DNS names
    assert options["file_overwrite"] is False  # as the local folder: a taken name is not replaced
    aws = default_storage_settings(S3)["OPTIONS"]
    assert aws["endpoint_url"] is None and aws["addressing_style"] is None
    assert aws["location"] == "" and aws["region_name"] is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BOLTZ_STORAGE": "nfs"}, "BOLTZ_STORAGE='nfs': expected 'local'"),
        ({"BOLTZ_STORAGE": "s3"}, "needs BOLTZ_S3_BUCKET"),
        ({**S3, "BOLTZ_S3_BUCKET": "My_Bucket"}, "BOLTZ_S3_BUCKET='My_Bucket': not a bucket"),
        ({**S3, "BOLTZ_S3_ENDPOINT_URL": "minio:9000"}, "BOLTZ_S3_ENDPOINT_URL='minio:9000'"),
        ({**S3, "BOLTZ_S3_ADDRESSING_STYLE": "dns"}, "BOLTZ_S3_ADDRESSING_STYLE='dns'"),
        ({**S3, "AWS_ACCESS_KEY_ID": "id"}, "AWS_SECRET_ACCESS_KEY is not set"),
        ({**S3, "AWS_SECRET_ACCESS_KEY": "s"}, "AWS_ACCESS_KEY_ID is not set"),
        ({**S3, "BOLTZ_S3_PREFIX": "a/../b"}, "BOLTZ_S3_PREFIX='a/../b'"),
        # A bucket named but the switch forgotten: each host would keep its own files.
        ({"BOLTZ_S3_BUCKET": "boltz-files"}, "BOLTZ_S3_BUCKET set but BOLTZ_STORAGE is not"),
    ],
)
def test_the_setting_refuses_what_cannot_work_naming_the_variable(env, message):
    with pytest.raises(ImproperlyConfigured, match=message.replace("(", r"\(")):
        default_storage_settings(env)


def test_s3_without_django_storages_says_how_to_install_it(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name == "storages" else real_find_spec(name),
    )
    with pytest.raises(ImproperlyConfigured, match=r"pip install 'boltz\[s3\]'"):
        default_storage_settings(S3)


def test_a_process_with_a_bad_setting_does_not_start():
    env = {**os.environ, "BOLTZ_STORAGE": "s3", "BOLTZ_S3_BUCKET": ""}
    run = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "BOLTZ_STORAGE=s3 needs BOLTZ_S3_BUCKET" in run.stderr


# --- the real pipeline on a bucket -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3-compatible server on 127.0.0.1 (no network, no account), stopped at the end."""
    import importlib.util

    require(importlib.util.find_spec("moto") is not None, "moto is not installed (make install)")
    port = _free_port()
    log_dir = ROOT / "test-results" / "s3"
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"moto-{port}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                alive = proc.poll() is None and time.monotonic() < deadline
                require(alive, "moto's S3 server did not start (pip install 'moto[server]')")
                time.sleep(0.2)
        yield url
    finally:
        stop_group(proc)


@pytest.fixture(scope="module")
def on_s3(s3_server, django_db_setup, django_db_blocker, docker_ready, redis_ready):
    """A bucket, and a worker and a served web process both keeping their files in it (under a
    prefix, as an operator sharing a bucket would), on a queue and host of their own."""
    import boto3

    bucket, prefix = f"boltz-{uuid.uuid4().hex[:10]}", "boltz"
    env = {
        "BOLTZ_STORAGE": "s3",
        "BOLTZ_S3_BUCKET": bucket,
        "BOLTZ_S3_ENDPOINT_URL": s3_server,
        "BOLTZ_S3_REGION": "us-east-1",
        "BOLTZ_S3_PREFIX": prefix,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    client = boto3.client(
        "s3",
        endpoint_url=s3_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=bucket)
    queue, host = f"s3-{uuid.uuid4().hex[:8]}", f"s3-{uuid.uuid4().hex[:4]}"
    with (
        run_worker(queue=queue, host=host, capacity=1, env=env),
        run_web({**env, "BOLTZ_QUEUE": queue}) as url,
    ):

        def objects(under: str = "") -> dict[str, bytes]:
            """The bucket's objects under `prefix/under`, by storage name, with their bytes."""
            found = {}
            pages = client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=bucket, Prefix=f"{prefix}/{under}"):
                for item in page.get("Contents", []):
                    body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                    found[item["Key"].removeprefix(f"{prefix}/")] = body
            return found

        # The same bucket for this test process (where it loads a task), as the others see it.
        default = default_storage_settings(env)
        default["OPTIONS"].update(access_key="testing", secret_key="testing")
        storages = {**settings.STORAGES, "default": default}
        yield SimpleNamespace(url=url, host=host, objects=objects, storages=storages)


def _not_written_here(names: list[str], since: float) -> list[str]:
    """Those of `names` this test wrote to the local folder (MEDIA_ROOT) after `since`."""
    local = [settings.MEDIA_ROOT / name for name in names]
    return [str(p) for p in local if p.exists() and p.stat().st_mtime >= since]


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(300)
def test_an_attempt_on_s3_keeps_its_files_in_the_bucket_and_reads_them_back(on_s3, load_example):
    from django.contrib.auth import get_user_model

    from attempts.api.tokens import token_create
    from attempts.models import Agent, Attempt, Outcome
    from tests.test_container_faults import signed_in

    began = time.time() - 1
    # A task whose repository is a folder of files: kept as a git bundle in the bucket, from
    # which the worker (any host) makes its mirror; the local folder is nobody's repository.
    with override_settings(STORAGES=on_s3.storages):
        task = load_example("fix-add")
    assert task.repo_url.startswith("stored:task-repos/fix-add-"), task.repo_url
    bundle = task.repo_url.removeprefix("stored:")
    assert on_s3.objects(bundle)[bundle].startswith(b"# v2 git bundle")
    hint = f"hint {uuid.uuid4().hex}\n".encode()
    name = f"s3-agent-{uuid.uuid4().hex[:6]}"
    command = (
        'cat "$BOLTZ_AGENT_DIR/hint.txt" && '
        "sed -i 's/return a - b/return a + b/' calc.py && printf 'x%.0s' $(seq 3000)"
    )
    username = f"rev-{uuid.uuid4().hex[:6]}"
    with signed_in(on_s3.url, username) as pages:
        # An upload through the web process (a saved agent's file) lands in the bucket...
        form = pages.get("/admin/attempts/agent/add/")
        assert form.status_code == 200
        saved = pages.post(
            "/admin/attempts/agent/add/",
            data={
                "name": name,
                "command": command,
                "environment": "",
                "csrfmiddlewaretoken": pages.cookies["csrftoken"],
                "_save": "Save",
            },
            files={"uploads": ("hint.txt", hint, "text/plain")},
            headers={"Referer": on_s3.url + "/admin/attempts/agent/add/"},
        )
        assert saved.status_code == 302, saved.text[:2000]
        agent = Agent.objects.get(name=name)
        (entry,) = agent.files
        assert on_s3.objects(entry["storage"]) == {entry["storage"]: hint}
        assert not _not_written_here([entry["storage"]], began)

        # ... and the worker reads it from there: the agent printed it.
        _row, token = token_create(user=get_user_model().objects.get(username=username))
        started = httpx.post(
            f"{on_s3.url}/api/tasks/{task.slug}/attempts",
            json={"agent": name, "n": 1},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert started.status_code == 201, started.text
        (attempt,) = wait_finished([Attempt(pk=started.json()[0]["id"])], timeout=240)
        assert attempt.outcome == Outcome.PASSED, attempt.failure_reason
        assert attempt.diff_file and attempt.workspace_file

        # Raw outputs, the diff and the workspace are in the bucket, and not in the local folder.
        stored = on_s3.objects(f"attempts/{attempt.pk}/")
        assert attempt.diff_file in stored and attempt.workspace_file in stored
        assert b"+    return a + b" in stored[attempt.diff_file]
        outputs = {k: v for k, v in stored.items() if "/outputs/" in k}
        agent_out = [v for k, v in outputs.items() if k.endswith(".stdout") and hint in v]
        assert agent_out, sorted(outputs)
        check_out = [v for v in outputs.values() if b"passed" in v]
        assert check_out, sorted(outputs)
        assert not _not_written_here(list(stored), began)

        # The review page links each raw output; each link serves it from the bucket.
        page = pages.get(f"/attempts/{attempt.pk}/")
        assert page.status_code == 200 and "return a + b" in page.text
        for key, body in outputs.items():
            served = pages.get(f"/attempts/{attempt.pk}/outputs/{key.rsplit('/', 1)[1]}")
            assert served.status_code == 200 and served.content == body, key
        api_output = httpx.get(
            f"{on_s3.url}/api/attempts/{attempt.pk}/outputs/"
            + next(k for k, v in outputs.items() if hint in v).rsplit("/", 1)[1],
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert api_output.status_code == 200 and hint in api_output.content

        # The export bundle carries the full patch, the workspace and the raw outputs, from there.
        export = pages.get(f"/attempts/{attempt.pk}/export.zip")
        assert export.status_code == 200, export.text[:500]
        bundle = zipfile.ZipFile(io.BytesIO(export.content))
        assert bundle.read("changes.patch") == stored[attempt.diff_file]
        assert bundle.read("workspace.tar.gz") == stored[attempt.workspace_file]
        exported = {
            n.rsplit("/", 1)[1]: bundle.read(n) for n in bundle.namelist() if "outputs/" in n
        }
        assert {k.rsplit("/", 1)[1]: v for k, v in outputs.items()} == exported

        # Deleting the attempt (on its page) deletes its objects from the bucket.
        confirm = pages.get(f"/attempts/{attempt.pk}/delete/attempt/")
        assert confirm.status_code == 200
        deleted = pages.post(
            f"/attempts/{attempt.pk}/delete/attempt/",
            data={"csrfmiddlewaretoken": pages.cookies["csrftoken"], "confirm": "yes"},
            headers={"Referer": f"{on_s3.url}/attempts/{attempt.pk}/"},
        )
        assert deleted.status_code == 302, deleted.text[:500]
        assert not Attempt.objects.filter(pk=attempt.pk).exists()
        wait_until(lambda: not on_s3.objects(f"attempts/{attempt.pk}/"), 60, "objects deleted")


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(240)
def test_an_api_sandbox_from_an_image_on_s3_keeps_its_repository_and_outputs_in_the_bucket(on_s3):
    from attempts.dispatch.hosts import register_host
    from attempts.models import Attempt
    from tests.conftest import sdk_client

    # The worker's images, as it reports them at its start (an earlier test's flush took them).
    register_host(on_s3.host, 1, images=[settings.BOLTZ_DEFAULT_IMAGE])
    began = time.time() - 1
    # The web process makes the image's task; its (empty) repository is a bundle the worker
    # reads from the bucket, not a folder on the web host.
    with (
        sdk_client(on_s3.url, f"sdk-{uuid.uuid4().hex[:6]}") as client,
        client.sandbox(image=settings.BOLTZ_DEFAULT_IMAGE) as box,
    ):
        result = box.exec("head -c 200000 /dev/zero | tr '\\0' y")
        assert result.exit_code == 0 and result.truncated
        attempt = Attempt.objects.select_related("task").get(pk=box.id)
        assert attempt.task.repo_url.startswith("stored:task-repos/image-")
        bundle = attempt.task.repo_url.removeprefix("stored:")
        assert bundle in on_s3.objects("task-repos/")
        # The whole output, stored by the worker, is read back by the web process.
        whole = box.exec("head -c 200000 /dev/zero | tr '\\0' y", max_output=300_000)
        assert whole.stdout == "y" * 200000 and not whole.truncated
    stored = on_s3.objects(f"attempts/{attempt.pk}/outputs/")
    assert any(v == b"y" * 200000 for v in stored.values()), sorted(stored)
    assert not _not_written_here(list(stored), began)

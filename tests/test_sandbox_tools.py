"""Boltz's own tools in every sandbox: its busybox and scripts come from a read-only mount at
/.boltz, so nothing of the image's or the agent's runs when Boltz runs a helper (the init's
sleep, the exec wrapper and its timeouts, the cgroup read, file operations, reset scripts),
even when a root agent replaced the image's tools; and API file operations act as the
sandbox's user. Real Docker (and a real worker and web server where the API is driven)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import random
import tarfile

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from attempts.api.tokens import token_create
from attempts.models import Outcome, Task
from attempts.run import harbor_layout
from attempts.run import session as files
from attempts.run.docker import tools
from attempts.run.docker.runtime import HOST_GRACE, Sandbox, SandboxSpec
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished

pytestmark = [pytest.mark.docker]

# What a root agent leaves in place of the image's helpers: each one, if anything of Boltz's
# ran it, would leave a marker saying as whom.
TRAP = "#!/bin/sh\ntouch /tmp/pwned-as-$(id -u)\n"
TRAPPED = ["timeout", "cat", "find", "tar", "stat", "rm", "xargs", "mkdir", "chmod"]
TRAPPED += ["dirname", "basename", "ls", "setsid", "kill"]
BREAK_THE_IMAGE = (
    "set -e; rm /usr/bin/sleep; "
    f"for t in {' '.join(TRAPPED)}; do printf '%s' \"$TRAP\" > /usr/bin/$t; done; echo broken"
)


@contextlib.contextmanager
def sandbox(*, root_allowed: bool = False, pids: int = 64):
    """A started sandbox of the default image made directly by the runtime, removed after."""
    spec = SandboxSpec(
        attempt_id=random.randint(10**8, 10**9),
        image=settings.BOLTZ_DEFAULT_IMAGE,
        cpus=1,
        memory_bytes=2**28,
        pids_limit=pids,
        root_allowed=root_allowed,
        role="tools-test",
    )
    box = Sandbox.create(spec)
    try:
        box.start()
        yield box
    finally:
        box.remove()


def run(box: Sandbox, argv: list[str], *, user: str = "1000:1000", timeout: float = 30, **kw):
    out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
    result = box.exec(
        argv, timeout=timeout, on_output=lambda s, d: out[s].extend(d), user=user, **kw
    )
    return result, out["stdout"].decode(errors="replace"), out["stderr"].decode(errors="replace")


def markers(box: Sandbox) -> list[str]:
    """The trap markers in /tmp, read by Docker (nothing in the sandbox runs)."""
    return sorted(n for n in box.read_files("/tmp", max_bytes=1024) if "pwned-as-" in n)


def test_a_root_agent_that_breaks_the_images_helpers_breaks_nothing_of_boltzs(
    django_db_setup, docker_ready
):
    with sandbox(root_allowed=True) as box:
        broke, out, err = run(
            box, ["/bin/sh", "-c", BREAK_THE_IMAGE], user="0:0", environment={"TRAP": TRAP}
        )
        assert (broke.exit_code, out) == (0, "broken\n"), err
        # Commands still run, by argv, with timeouts that end them (root's and the user's).
        for user in ("0:0", "1000:1000"):
            ran, out, _ = run(box, ["id", "-u"], user=user)
            assert (ran.exit_code, out) == (0, user.split(":")[0] + "\n")
            spun, _, _ = run(box, ["/bin/sh", "-c", "while :; do :; done"], user=user, timeout=1)
            assert spun.timed_out and spun.exit_code in (124, 137) and not spun.killed_by_host
            assert 1 <= spun.duration < 1 + HOST_GRACE
        assert box.oom_kills() == 0
        # Every file script of Boltz's, as root (a Harbor task's agent) and as the user.
        for user in ("0:0", "1000:1000"):
            folder = f"/tmp/box-{user[0]}"
            untar = _staged(box, _tar({"sub/b.txt": b"b"}), user)
            unpacked, _, err = _tool(box, "untar", [untar, folder], user)
            assert unpacked.exit_code == 0, err
            staged = _staged(box, b"hello", user)
            wrote, _, err = _tool(box, "write", [staged, f"{folder}/a.txt", "644"], user)
            assert wrote.exit_code == 0, err
            read, out, err = _tool(box, "read", [f"{folder}/a.txt"], user)
            assert (read.exit_code, out) == (0, "hello"), (
                read,
                err,
                run(box, ["ls", "-l", folder]),
            )
            listed, out, _ = _tool(box, "list", [folder], user)
            assert listed.exit_code == 0 and "./a.txt" in out and "regular file|5|644" in out
            assert "directory|" in out and "./sub" in out
            packed, out, _ = _tool(box, "archive", [folder], user)
            assert packed.exit_code == 0 and "sub/b.txt" in out
            deleted, _, _ = _tool(box, "delete", [folder], user)
            assert deleted.exit_code == 0
        cleared, _, err = _run_tool(box, harbor_layout._CLEAR_AGENT, [], "0:0")
        assert cleared.exit_code == 0, err
        # The in-place check's restart: every process ended, the init's sleep started again.
        box.halt()
        box.start()
        box.ensure_running()
        box.kill_all_processes()
        ran, out, _ = run(box, ["/bin/sh", "-c", "echo alive"], user="0:0")
        assert (ran.exit_code, out) == (0, "alive\n")
        assert markers(box) == []  # nothing of Boltz's ran the agent's traps
        # The traps were real: the agent's own `cat` springs them.
        run(box, ["cat", "/etc/hostname"], user="0:0")
        assert markers(box) == ["pwned-as-0"]


def own_of(groups: set[str]) -> str:
    (group,) = groups
    return f" {group}"


def _tool(box: Sandbox, name: str, args: list[str], user: str):
    return _run_tool(box, files._FILE_SCRIPTS[name], args, user)


def _run_tool(box: Sandbox, script: str, args: list[str], user: str):
    out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
    result = box.run_tool(
        script, args, on_output=lambda s, d: out[s].extend(d), user=user, workdir="/"
    )
    return result, out["stdout"].decode(errors="replace"), out["stderr"].decode(errors="replace")


def _tar(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _staged(box: Sandbox, data: bytes, user: str) -> str:
    uid, _, gid = user.partition(":")
    name = f"tmp/.staged-{random.randint(0, 10**9)}"
    box.put_archive("/", files.files_tar({name: data}, mode=0o600, owner=(int(uid), int(gid))))
    return "/" + name


def test_a_root_agent_cannot_move_unmount_or_write_boltzs_tools(django_db_setup, docker_ready):
    with sandbox(root_allowed=True) as box:
        attempts = {
            "mv /.boltz /.moved": "busy",
            "umount /.boltz": "",
            "umount -l /.boltz": "",
            "mount -t tmpfs tmpfs /.boltz": "",
            "touch /.boltz/x": "Read-only file system",
            "rm -f /.boltz/busybox": "Read-only file system",
            "chmod 777 /.boltz/exec.sh": "Read-only file system",
            "ln -sf /bin/true /.boltz/bin/sh": "Read-only file system",
            "echo x >> /.boltz/exec.sh": "Read-only file system",
        }
        for command, why in attempts.items():
            tried, _, err = run(box, ["/bin/sh", "-c", command], user="0:0")
            assert tried.exit_code != 0, command
            assert why.lower() in err.lower(), (command, err)
        summed, out, _ = run(
            box, [tools.BUSYBOX, "sha256sum", tools.BUSYBOX, tools.EXEC_SCRIPT], user="0:0"
        )
        host = hashlib.sha256(tools.HOST_BUSYBOX.read_bytes()).hexdigest()
        script = hashlib.sha256(tools.EXEC_WRAPPER.encode()).hexdigest()
        assert out.split()[::2] == [host, script]
        # Docker's mount point is not the agent's change.
        assert not [p for p, _ in box.changed_paths() if p.startswith(tools.TOOLS_DIR)]
        # And the init's `sleep` is Boltz's.
        assert box.state()["Running"]
        shown, out, _ = run(box, [tools.BUSYBOX, "ps", "-o", "args"])
        assert f"{tools.BUSYBOX} sleep infinity" in out


def test_timeouts_end_the_whole_group_and_leave_no_process_behind(django_db_setup, docker_ready):
    # 16 processes at most: a watcher left behind by each command would soon use them up.
    with sandbox(pids=16) as box:
        for _ in range(40):
            ran, out, _ = run(box, ["echo", "ok"])
            assert (ran.exit_code, out, ran.timed_out) == (0, "ok\n", False)
        group, _, _ = run(
            box,
            ["/bin/sh", "-c", "sleep 100 & (sleep 200 &) ; sleep 300"],
            timeout=1,
        )
        assert group.timed_out and group.exit_code == 124 and not group.killed_by_host
        stubborn, _, _ = run(box, ["/bin/sh", "-c", "trap '' TERM; sleep 100"], timeout=1)
        assert stubborn.timed_out and stubborn.exit_code == 137
        assert 3 <= stubborn.duration < 1 + HOST_GRACE
        early, _, _ = run(box, ["/bin/sh", "-c", "exit 124"], timeout=30)
        assert early.exit_code == 124 and not early.timed_out
        missing, _, err = run(box, ["no-such-program"])
        assert missing.exit_code == 127
        assert (
            err == "timeout: failed to run command 'no-such-program': No such file or directory\n"
        )
        # argv runs as given: the image's own programs (not busybox's applets), its argv[0],
        # the environment it was given (no shell's SHLVL or PWD added).
        ls, out, _ = run(box, ["ls", "--version"])
        assert ls.exit_code == 0 and "GNU coreutils" in out
        argv0, out, _ = run(box, ["bash", "-c", 'echo "$0"'])
        assert out == "bash\n"
        env, out, _ = run(box, ["env"], environment={"X": "1"})
        lines = out.splitlines()
        assert "X=1" in lines and not [n for n in lines if n.startswith(("SHLVL=", "PWD="))]
        # Nothing is left of those commands: only the init, its sleep, and this command's own
        # wrapper and watcher (a group of its own) run.
        shown, out, _ = run(
            box, [tools.BUSYBOX, "sh", "-c", f"sleep 0.3; {tools.BUSYBOX} ps -o pid,pgid,args"]
        )
        rows = [row.split(None, 2) for row in out.strip().splitlines()[1:]]
        own = {pgid for _, pgid, args in rows if args.startswith(f"{tools.BUSYBOX} ps")}
        own |= {
            pid for pid, _, args in rows if "boltz-watch" in args and args.endswith(own_of(own))
        }
        others = sorted(args for _, pgid, args in rows if pgid not in own)
        assert others == sorted(
            [
                f"/sbin/docker-init -- {tools.BUSYBOX} sleep infinity",
                f"{tools.BUSYBOX} sleep infinity",
            ]
        ), out


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_harbor_root_agent_that_breaks_the_images_helpers_is_still_checked(worker, docker_ready):
    from tests.test_harbor import HARBOR, run_import

    run_import(HARBOR / "system-tool")  # the agent and the verifier are root
    task = Task.objects.get(slug="system-tool")
    solve = "install -m 755 /srv/project/tally.sh /usr/local/bin/tally; "
    solve += "echo unit=items > /etc/tally.conf; "
    command = f"export TRAP='{TRAP}'; {solve}{BREAK_THE_IMAGE}"
    (attempt,) = wait_finished([attempt_create(task=task, agent="command", command=command)], 120)
    check = attempt.checks.first()
    assert check is not None, (attempt.outcome, attempt.failure_reason)
    # The check ran in place after the agent's processes were ended and the sandbox started
    # again (with no /usr/bin/sleep), its folders cleared by Boltz's scripts: it passed.
    assert attempt.outcome == Outcome.PASSED, (attempt.failure_reason, check.output)
    assert markers(Sandbox(attempt.container_id)) == []


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_api_uploads_are_unpacked_by_the_sandbox_user(web, worker, load_example):
    load_example("fix-add")
    _row, token = token_create(user=get_user_model().objects.create_user("uploader"))
    api = httpx.Client(base_url=web, headers={"Authorization": f"Bearer {token}"}, timeout=120)
    with api:
        sid = api.post("/api/sandboxes", json={"task": "fix-add"}).json()["id"]
        try:
            for folder, name in (("/", "etc/x"), ("/usr/lib/python3/dist-packages", "x.py")):
                refused = api.put(
                    f"/api/sandboxes/{sid}/archive",
                    params={"path": folder},
                    content=_tar({name: b"import os\n"}),
                )
                assert (refused.status_code, refused.json()["code"]) == (
                    403,
                    "permission_denied",
                ), refused.text
            looked = api.post(
                f"/api/sandboxes/{sid}/exec",
                json={"command": "ls /etc/x /usr/lib/python3/dist-packages/x.py"},
            ).json()
            assert looked["exit_code"] != 0 and looked["stderr"].count("No such file") == 2
            payload = io.BytesIO()
            with tarfile.open(fileobj=payload, mode="w") as tar:
                for name, data in (("pkg/mod.py", b"x = 1\n"), ("top.txt", b"t")):
                    info = tarfile.TarInfo(name)
                    info.size, info.mode = len(data), 0o4755  # setuid: dropped
                    info.uid = info.gid = 0
                    tar.addfile(info, io.BytesIO(data))
                link = tarfile.TarInfo("pkg/link")
                link.type, link.linkname = tarfile.SYMTYPE, "mod.py"
                tar.addfile(link)
            for _ in range(2):  # a second upload replaces what the first made
                done = api.put(
                    f"/api/sandboxes/{sid}/archive",
                    params={"path": "/workspace/up"},
                    content=payload.getvalue(),
                )
                assert done.status_code == 200 and done.json()["files"] == 3, done.text
            # The timeline keeps what was uploaded, contents too (for the exports), read once.
            from attempts.models import Event

            upload = Event.objects.filter(kind="file", data__action="upload").last()
            kept = {e["path"]: e.get("content") for e in upload.data["entries"]}
            assert "x = 1\n" in kept.values() and "t" in kept.values(), upload.data
            owners = api.post(
                f"/api/sandboxes/{sid}/exec",
                json={"command": "stat -c '%u:%g %a %N' up up/pkg up/pkg/mod.py up/top.txt"},
            ).json()
            rows = owners["stdout"].splitlines()
            assert all(row.startswith("1000:1000 ") for row in rows), rows
            assert rows[2].startswith("1000:1000 755 ")
            listed = api.get(f"/api/sandboxes/{sid}/files/list", params={"path": "up/pkg"})
            entries = {e["name"]: (e["type"], e["size"], e["mode"]) for e in listed.json()}
            assert entries == {"mod.py": ("file", 6, "755"), "link": ("link", 6, "777")}
        finally:
            api.delete(f"/api/sandboxes/{sid}")


def test_a_host_without_static_busybox_is_refused_naming_the_package(
    monkeypatch, tmp_path, settings
):
    monkeypatch.setattr(tools, "HOST_BUSYBOX", tmp_path / "busybox")
    assert "busybox-static" in tools.host_problem()
    (tmp_path / "busybox").write_bytes(tools.Path("/bin/sh").read_bytes())  # a dynamic ELF
    assert "not statically linked" in tools.host_problem()
    monkeypatch.setattr(tools, "HOST_BUSYBOX", tools.Path("/bin/busybox"))
    assert tools.host_problem() is None
    settings.DATA_DIR = tmp_path / "data"
    monkeypatch.setattr(tools, "_ready", None)
    made = tools.ensure()
    assert made == tools.ensure() and made.parent == tmp_path / "data" / "sandbox-tools"
    assert oct(made.stat().st_mode & 0o777) == "0o755"
    assert oct((made / "exec.sh").stat().st_mode & 0o777) == "0o644"
    assert (made / "bin" / "sh").readlink() == tools.Path("../busybox")
    monkeypatch.setattr(tools, "_ready", None)
    (made / "exec.sh").chmod(0o666)
    (made / "exec.sh").write_text("changed")
    with pytest.raises(tools.InfrastructureError, match="not as Boltz made it"):
        tools.ensure()

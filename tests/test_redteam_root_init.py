"""Red team: a root agent ending its own sandbox, so that its attempt reads as an infrastructure
error, in a Harbor task whose verifier runs in a container of its own.

These attacks were written against root keeping CHOWN, DAC_OVERRIDE, FOWNER, SETUID and SETGID
there (commit 4a79102, reverted): with CAP_SETUID root became the init's uid and lowered its
RLIMIT_NPROC or RLIMIT_CPU, or filled the pids limit and killed its `sleep`; the init, made
non-dumpable, left its /proc/1 files to root, whose oom_score_adj any root could raise. Root
keeps no capabilities, and its init runs as a uid of its own from the start: each test asserts
the SAFE outcome (the attack fails: the agent's failure, score 0, never an infrastructure
error; or the init still runs), so none of them comes back."""

from __future__ import annotations

import contextlib

import pytest

from attempts.models import Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished
from tests.test_harbor import HARBOR, run_import

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.docker,
    pytest.mark.worker,
    pytest.mark.timeout(240),
]

GRADER = HARBOR / "separate-grader"


def _task() -> Task:
    run_import(GRADER)
    task = Task.objects.get(slug="separate-grader")
    return task


def _run(task: Task, *commands: str, timeout: float = 200):
    attempts = wait_finished(
        [attempt_create(task=task, agent="command", command=c) for c in commands], timeout
    )
    return attempts


def _said(attempt) -> str:
    return f"{attempt.outcome} score={attempt.score} reason={attempt.failure_reason[-300:]!r}"


def _agent_output(attempt) -> str:
    """The agent's command's stdout and stderr (their summaries: head and tail)."""
    from attempts.models import EventKind

    parts = []
    for e in attempt.events.filter(kind=EventKind.EXEC, data__phase="end"):
        parts.append(repr(e.data.get("stdout")) + "\n" + repr(e.data.get("stderr")))
    return "\n".join(parts)[-4000:]


# --- 1. ending the sandbox ---------------------------------------------------------------------
# CAP_SETUID lets root become the init's own uid (65533). Same real/effective/saved uid is all
# prlimit(2) asks to change another process's limits (no CAP_SYS_RESOURCE needed to LOWER them).
# With RLIMIT_NPROC 0 on PID 1, its next fork fails; busybox sh then exits ("can't fork"), the
# pid namespace's first process is gone and the container stops. Killing the init's `sleep`
# (same uid: allowed) makes it fork at once.
NPROC_ON_INIT = r"""python3 - <<'EOF'
import os, resource, signal
os.setgroups([]); os.setgid(65533); os.setuid(65533)
resource.prlimit(1, resource.RLIMIT_NPROC, (0, 0))
print("init nproc now", resource.prlimit(1, resource.RLIMIT_NPROC), flush=True)
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in (1, os.getpid()):
        try:
            os.kill(int(pid), signal.SIGKILL)  # the init's sleep (uid 65533)
        except OSError:
            pass
EOF
sleep 5; echo still here"""


def test_root_cannot_end_its_sandbox_by_lowering_the_inits_nproc_limit(worker, docker_ready):
    task = _task()
    (attempt,) = _run(task, NPROC_ON_INIT)
    # Observed before a fix: infra_error, the container exited 2 ("/.boltz/sealed/sh: can't
    # fork: Resource temporarily unavailable"), score None: dropped from the scores.
    assert attempt.outcome == Outcome.FAILED, _said(attempt)
    assert attempt.score == 0, _said(attempt)


# The same with RLIMIT_CPU: the kernel's SIGKILL at the hard limit (SEND_SIG_PRIV) reaches a pid
# namespace's init. The init must spend a second of CPU: it forks a new sleep each time one is
# killed, so killing its sleep in a tight loop makes it burn CPU.
CPU_ON_INIT = r"""python3 - <<'EOF'
import os, resource, signal, time
os.setgroups([]); os.setgid(65533); os.setuid(65533)
resource.prlimit(1, resource.RLIMIT_CPU, (1, 1))
me = os.getpid()
end = time.monotonic() + 40
while time.monotonic() < end:
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) not in (1, me):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        os.kill(1, signal.SIGCHLD)
    except OSError:
        break
    if not os.path.exists("/proc/1/status"):
        break
EOF
echo still here"""


def test_root_cannot_end_its_sandbox_by_lowering_the_inits_cpu_limit(worker, docker_ready):
    task = _task()
    (attempt,) = _run(task, CPU_ON_INIT)
    assert attempt.outcome == Outcome.FAILED, _said(attempt)
    assert attempt.score == 0, _said(attempt)


# Non-dumpable, the init's /proc/1 files belong to root: root (even without any capability) can
# raise /proc/1/oom_score_adj to 1000, then run out of memory: the kernel's OOM killer picks
# PID 1, the container stops. Before the change /proc/1 belonged to 65533, out of root's reach.
OOM_ON_INIT = r"""echo 1000 > /proc/1/oom_score_adj; cat /proc/1/oom_score_adj
python3 -c '
b = []
while True:
    b.append(bytearray(16 << 20))
'
echo still here"""


def test_root_cannot_make_the_oom_killer_pick_the_init_for_an_infra_error(worker, docker_ready):
    task = _task()
    (attempt,) = _run(task, OOM_ON_INIT)
    # Boltz reads a container killed for memory during the agent's step as the agent's doing.
    assert attempt.outcome == Outcome.FAILED, _said(attempt)
    print(_said(attempt))
    assert attempt.score == 0, _said(attempt)


# Without prlimit: fill the sandbox's pids cgroup, then (as the init's uid, thanks to SETUID)
# kill the init's `sleep`. Its fork fails at the cgroup's limit, and busybox sh exits.
PIDS_THEN_KILL_SLEEP = r"""python3 - <<'EOF2'
import os, signal, time
def spin(until):  # grab any pid freed, before the init can
    while time.monotonic() < until:
        try:
            if os.fork() == 0:
                time.sleep(120); os._exit(0)
        except OSError:
            pass
kids = []
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        spin(time.monotonic() + 8) if len(kids) < 40 else time.sleep(120)
        time.sleep(120)
        os._exit(0)
    kids.append(pid)
time.sleep(0.5)
os.setgroups([]); os.setgid(65533); os.setuid(65533)  # the init's uid: its sleep is ours
for i in range(50):
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, os.getpid()):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    time.sleep(0.05)
    if not os.path.exists("/proc/1/status"):
        break
EOF2
echo still here"""


def test_root_cannot_end_its_sandbox_by_filling_the_pids_limit_and_killing_the_inits_sleep(
    worker, docker_ready
):
    task = _task()
    (attempt,) = _run(task, PIDS_THEN_KILL_SLEEP)
    assert attempt.outcome == Outcome.FAILED, _said(attempt)
    assert attempt.score == 0, _said(attempt)


# As the init's own uid (SETUID), or root where it cannot: every signal to PID 1, SIGSTOP included, `kill -9 -1` again
# and again (its `sleep` dies, it starts another), and a trace of it. The init must live on.
SIGNALS_AS_INIT_UID = r"""python3 - <<'EOF2'
import ctypes, os, signal, time
try:  # with CAP_SETUID; a root without it stays root and tries all the same
    os.setgroups([]); os.setgid(65533); os.setuid(65533)
except OSError:
    print("stayed root", flush=True)
refused = []
for s in range(1, 65):
    if s in (32, 33):
        continue
    try:
        os.kill(1, s)
    except OSError as exc:
        refused.append((s, exc.errno))
for _ in range(20):
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    time.sleep(0.05)
libc = ctypes.CDLL(None, use_errno=True)
print("attach", libc.ptrace(16, 1, 0, 0), ctypes.get_errno(), flush=True)
time.sleep(2)
print("init alive:", os.path.exists("/proc/1/status"), open("/proc/1/stat").read().split()[2],
      "refused", refused, flush=True)
EOF2
echo still here"""


def test_as_the_inits_uid_no_signal_nor_trace_ends_the_init(worker, docker_ready):
    task = _task()
    (attempt,) = _run(task, SIGNALS_AS_INIT_UID)
    said = _agent_output(attempt)
    print(said)
    assert "attach -1 1" in said, said  # the trace refused (EPERM)
    # The init lived on: the attempt is the agent's failure, never an infrastructure error.
    # (Root's `kill -9 -1` takes its own exec's wrapper too, so the rest of what it prints
    # may be lost with the pipe.)
    assert attempt.outcome == Outcome.FAILED, _said(attempt)
    assert attempt.score == 0, _said(attempt)


def _copy_grader(tmp_path, slug: str, extra: str) -> Task:
    import shutil

    folder = tmp_path / slug
    shutil.copytree(GRADER, folder)
    test_sh = folder / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text() + extra)
    run_import(folder)
    return Task.objects.get(slug=slug)


# What root with the file capabilities can make of what is handed over: a setuid-root shell, a
# setgid file, files of other owners (the verifier's uid among them), a mode-0 file, a fifo, a
# socket, hard links to root's files (FOWNER passes protected_hardlinks), and /app/out.txt a hard
# link to a file that says `ready` owned by the verifier's uid. The verifier reports what it got.
HANDOVER = r"""set -x
cd /logs/artifacts
cp /bin/bash suid-bash && chown 0:0 suid-bash && chmod 6755 suid-bash
echo x > sgid && chown 1000:0 sgid && chmod 2777 sgid
echo mine > theirs && chown 1000:1000 theirs && chmod 0600 theirs
echo sealed > nobody && chmod 000 nobody
mkfifo fifo
python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind("sock")'
ln /etc/shadow shadow-link
ln /.boltz/busybox bb-link 2>&1
mknod dev c 1 3 2>&1
mkdir -p sub && chmod 1777 sub && chown 1000 sub
echo ready > /tmp/r && chown 1000:1000 /tmp/r && rm -f /app/out.txt && ln /tmp/r /app/out.txt
ls -ln /logs/artifacts /app
"""
HANDOVER_REPORT = r"""
find /logs/artifacts /app -perm /7000 2>/dev/null | sed 's/^/SUID: /'
ls -lnR /logs/artifacts /app 2>&1 | sed 's/^/GOT: /'
"""


def test_what_root_makes_with_file_capabilities_crosses_as_plain_files_of_the_verifier(
    worker, docker_ready, tmp_path
):
    task = _copy_grader(tmp_path, "sep-rootcaps", HANDOVER_REPORT)
    (attempt,) = _run(task, HANDOVER)
    output = attempt.checks.get().output
    print(output)
    assert "SUID: " not in output, output
    listed = [line.split() for line in output.splitlines() if line.startswith("GOT: -")]
    listed += [line.split() for line in output.splitlines() if line.startswith("GOT: d")]
    assert listed and all(row[3:5] == ["1000", "1000"] for row in listed), output  # the grader's
    for name in ("fifo", "sock", "dev", "bb-link"):
        assert f" {name}\n" not in output, output
    # /app/out.txt held `ready`: a pass is the agent's due here (it wrote the answer, through a
    # link); what matters is that it is not an infra error and that nothing else crossed.
    assert attempt.outcome in (Outcome.PASSED, Outcome.FAILED), _said(attempt)


# --- the same through the API (Inspect, SDK, pools): a live sandbox's death is always read as
# the host's fault (operations.py: "Not even memory is blamed on the client here"), so raising
# the init's oom_score_adj (its /proc/1 files are root's: it is not dumpable) and running out
# of memory ends the sandbox as an infrastructure error; a pool masks the step.
def test_api_root_cannot_end_a_live_sandbox_through_the_inits_oom_score_adj(
    web, worker, docker_ready
):
    import time

    from attempts.models import Attempt
    from boltz import BoltzError
    from tests.conftest import sdk_client

    run_import(GRADER)
    with sdk_client(web, "rootcaps-api") as client:
        sandbox = client.sandbox(task="separate-grader")
        try:
            said = sandbox.exec(
                "ls -ln /proc/1/oom_score_adj; echo 1000 > /proc/1/oom_score_adj; "
                "cat /proc/1/oom_score_adj"
            )
            print(said.stdout, said.stderr)
            try:
                sandbox.exec(
                    "python3 -c 'b=[]\nwhile True: b.append(bytearray(16<<20))'", timeout=30
                )
            except BoltzError as exc:
                print("hog:", exc)
            time.sleep(3)
            alive = None
            try:
                alive = sandbox.exec("echo alive").stdout
            except BoltzError as exc:
                alive = f"refused: {exc}"
            attempt = Attempt.objects.order_by("-pk").first()
            assert alive == "alive\n", (alive, _said(attempt))
        finally:
            with contextlib.suppress(BoltzError):
                sandbox.close()

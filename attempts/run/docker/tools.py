"""Boltz's own tools inside every sandbox: a folder on the worker's host holding a copy of
Debian's static busybox (`busybox-static`) and Boltz's scripts, bind-mounted read-only into
every container at `TOOLS_DIR`. Everything Boltz runs inside a sandbox for itself (the init's
`sleep`, the exec wrapper that enforces timeouts, its file and reset scripts, reading the
cgroup's counters) runs from there, never from the image or from what an agent changed: a root
agent without capabilities can neither write, rename nor unmount a read-only mount point.

The host folder is named after its content and written once per content (atomically, by a
rename), so containers made before an upgrade keep the tools they started with.

This module imports no Docker: `run_worker` checks the host with it before any worker starts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
import threading
from pathlib import Path

from django.conf import settings

from attempts.core.errors import InfrastructureError

# Where the tools are inside every sandbox (agent and check containers alike).
TOOLS_DIR = "/.boltz"
BUSYBOX = f"{TOOLS_DIR}/busybox"
# Links named after busybox's applets: the PATH of Boltz's scripts, so a name that is not one
# of busybox's applets runs nothing of the image's.
TOOLS_PATH = f"{TOOLS_DIR}/bin"
EXEC_SCRIPT = f"{TOOLS_DIR}/exec.sh"

HOST_BUSYBOX = Path("/bin/busybox")
PACKAGE = "busybox-static"

# The exec wrapper: `busybox sh exec.sh TIMEOUT ARGV...`. Docker makes every exec the leader
# of a session (and process group) of its own; the command runs as this script's child in that
# group, exactly as argv (found on its PATH as execvp finds it, with its own argv[0] and the
# environment it was given). A watcher in a session of its own (so the group's signals miss it)
# sends the whole group TERM at the timeout and KILL 2 s later; the script traps that TERM,
# and exits with the command's status, or 124 when the watcher fired (as coreutils `timeout`
# does; a group that needed KILL takes this script with it: exit 137). The watcher holds none
# of the exec's output and is ended, group and all, the moment the command ends.
# The messages for a command that cannot run are coreutils `timeout`'s, which callers parse.
EXEC_WRAPPER = r"""BB=/.boltz/busybox
if [ "$1" = --session ]; then
  shift
elif ! kill -0 -$$ 2>/dev/null; then
  # Not the leader of a process group of its own (Docker's execs are): become one.
  exec "$BB" setsid "$BB" sh "$0" --session "$@"
fi
# The command's stdin and stderr are fds 4 and 3 here; this shell says nothing of its own
# (such as "Terminated").
exec 4<&0 3>&2 2>/dev/null
t=$1
shift
a0=$1
shift
case $a0 in
*/*)
  prog=$a0
  if [ ! -e "$prog" ]; then
    echo "timeout: failed to run command '$a0': No such file or directory" >&3
    exit 127
  fi
  if [ -d "$prog" ] || [ ! -x "$prog" ]; then
    echo "timeout: failed to run command '$a0': Permission denied" >&3
    exit 126
  fi
  ;;
*)
  prog= denied=
  if [ -n "$a0" ]; then
    set -f
    IFS=:
    for d in ${PATH-/usr/local/bin:/usr/bin:/bin}; do
      f=${d:-.}/$a0
      if [ -f "$f" ] && [ -x "$f" ]; then prog=$f; break; fi
      [ -e "$f" ] && denied=1
    done
    unset IFS
  fi
  if [ -z "$prog" ]; then
    if [ -n "$denied" ]; then
      echo "timeout: failed to run command '$a0': Permission denied" >&3
      exit 126
    fi
    echo "timeout: failed to run command '$a0': No such file or directory" >&3
    exit 127
  fi
  ;;
esac
fired=
trap 'fired=1' TERM
"$BB" setsid "$BB" sh -c \
  '"$1" sleep "$2"; kill -TERM -"$3"; "$1" sleep 2; kill -KILL -"$3"' boltz-watch "$BB" "$t" "$$" \
  </dev/null >/dev/null 2>&1 3>&- 4<&- &
w=$!
# The command gets the environment this exec was given, not the SHLVL and PWD this shell set
# for itself: those it was given are read back from its first environment.
"$BB" grep -z -e '^SHLVL=' -e '^PWD=' "/proc/$$/environ" | {
  unset SHLVL PWD
  while IFS= read -r -d '' kv; do export "$kv"; done
  exec -a "$a0" "$prog" "$@" <&4 2>&3 3>&- 4<&-
}
s=$?
# The watcher first (it forks nothing more once dead), then its group: it may not have
# made its session yet, or already have its sleep running in it.
kill -KILL "$w"
kill -KILL -"$w"
wait "$w"
[ -n "$fired" ] && exit 124
exit "$s"
"""
# Bump when the folder's layout changes without its files changing.
_LAYOUT = b"boltz-sandbox-tools 1"

_lock = threading.Lock()
_ready: Path | None = None


def _is_static(path: Path) -> bool:
    """An ELF executable with no program interpreter: nothing of the image's is loaded to run
    it (a static-pie has no interpreter either)."""
    with path.open("rb") as handle:
        header = handle.read(64)
        if len(header) < 52 or header[:4] != b"\x7fELF":
            return False
        wide, order = header[4] == 2, "<" if header[5] == 1 else ">"
        if wide:
            (phoff,) = struct.unpack_from(order + "Q", header, 0x20)
            size, count = struct.unpack_from(order + "HH", header, 0x36)
        else:
            (phoff,) = struct.unpack_from(order + "I", header, 0x1C)
            size, count = struct.unpack_from(order + "HH", header, 0x2A)
        handle.seek(phoff)
        table = handle.read(size * count)
    pt_interp = 3
    return all(
        struct.unpack_from(order + "I", table, i * size)[0] != pt_interp
        for i in range(len(table) // size if size else 0)
    )


def host_problem() -> str | None:
    """Why this host cannot give sandboxes Boltz's tools (None: it can)."""
    how = f"install Debian's {PACKAGE} (apt-get install {PACKAGE}, or scripts/services.sh install)"
    if not HOST_BUSYBOX.is_file():
        return f"{HOST_BUSYBOX} is missing on host {settings.BOLTZ_HOST}: {how}"
    try:
        static = _is_static(HOST_BUSYBOX)
    except OSError as exc:
        return f"{HOST_BUSYBOX} cannot be read on host {settings.BOLTZ_HOST} ({exc}): {how}"
    if not static:
        return (
            f"{HOST_BUSYBOX} on host {settings.BOLTZ_HOST} is not statically linked (it is "
            f"Debian's `busybox`, not `{PACKAGE}`): {how}"
        )
    return None


def _applets() -> list[str]:
    listed = subprocess.run(
        [str(HOST_BUSYBOX), "--list"], capture_output=True, check=True, timeout=30
    ).stdout.decode()
    return sorted({name for name in listed.split() if name and "/" not in name})


def _build(folder: Path, busybox: bytes) -> None:
    folder.mkdir(mode=0o755)
    (folder / "busybox").write_bytes(busybox)
    (folder / "exec.sh").write_text(EXEC_WRAPPER)
    applets = folder / "bin"
    applets.mkdir(mode=0o755)
    for name in _applets():
        (applets / name).symlink_to("../busybox")
    for path, mode in ((folder, 0o755), (applets, 0o755), (folder / "busybox", 0o755)):
        path.chmod(mode)
    (folder / "exec.sh").chmod(0o644)


def ensure() -> Path:
    """The host folder mounted at TOOLS_DIR, made if this host has none yet for the current
    busybox and scripts. InfrastructureError (naming the package) if busybox-static is
    missing."""
    global _ready
    with _lock:
        if _ready is not None and (_ready / "busybox").is_file():
            return _ready
        problem = host_problem()
        if problem:
            raise InfrastructureError(f"Boltz's sandbox tools are unavailable: {problem}")
        busybox = HOST_BUSYBOX.read_bytes()
        digest = hashlib.sha256(b"\0".join([_LAYOUT, busybox, EXEC_WRAPPER.encode()])).hexdigest()[
            :16
        ]
        parent = Path(settings.DATA_DIR) / "sandbox-tools"
        parent.mkdir(parents=True, exist_ok=True)
        parent.chmod(0o755)
        folder = parent / digest
        if not folder.exists():
            staging = Path(tempfile.mkdtemp(prefix=".build-", dir=parent))
            try:
                _build(staging / "tools", busybox)
                try:
                    os.rename(staging / "tools", folder)
                except OSError:
                    if not folder.exists():  # else another worker's, made meanwhile
                        raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        # Only ever put in place whole (by a rename): anything else was changed by hand, and
        # running sandboxes may have it mounted.
        if not _complete(folder, busybox):
            raise InfrastructureError(
                f"Boltz's sandbox tools folder {folder} is not as Boltz made it: remove it "
                "(no sandbox of this host running) and Boltz makes it again"
            )
        _ready = folder
        return folder


def _complete(folder: Path, busybox: bytes) -> bool:
    try:
        return (
            (folder / "busybox").read_bytes() == busybox
            and (folder / "exec.sh").read_text() == EXEC_WRAPPER
            and (folder / "bin" / "sh").is_symlink()
        )
    except OSError:
        return False

"""The witness pipe of one check: where Boltz's pytest plugin sends each test's outcome as it
ends, read by a collector that the code under test cannot reach. Before the check, Docker puts
a folder into the container, owned by a uid of Boltz's own (WITNESS_UID) that runs nothing
else, and Boltz's busybox makes a named pipe (FIFO) in it as that uid (made inside, as gVisor
cannot open a pipe made outside it): anyone may write to the pipe, nobody but that uid may read
it, rename it or change its folder. A collector, Boltz's own busybox running as that uid,
copies every line from the pipe to its output, which Docker streams to the worker as it comes.
So a line the plugin wrote has left the sandbox before the code under test could rewrite
anything, and the check's user can neither read the pipe, nor signal the collector, nor replace
the pipe. After the check, Boltz writes a closing line with a secret only the collector knows
(it is in its environment, which other uids cannot read), and the collector stops there.
"""

from __future__ import annotations

import io
import secrets
import tarfile
import threading
from collections.abc import Callable

from attempts.core.errors import DiskFull, InfrastructureError
from attempts.run.docker.runtime import TOOL_ENV, ExecResult, tool_command
from attempts.run.scoring import WitnessRun, parse_witness_stream
from attempts.run.session import SandboxSession

WITNESS_UID = 65532
MAX_WITNESS_BYTES = 16 * 1024 * 1024
# The collector: every line to its output until the closing line. The pipe is opened for
# reading and writing, so it never sees an end of file between two pytest runs.
_COLLECT = r"""
exec 3<>"$1"
while IFS= read -r line <&3; do
  [ "$line" = "$BOLTZ_WITNESS_END" ] && exit 0
  printf '%s\n' "$line"
done
"""
_CLOSE = r"""printf '%s\n' "$BOLTZ_WITNESS_END" > "$1" """
_MAKE = r"""mkfifo -m 0622 "$1" """


class WitnessPipe:
    """One check's witness: `start()` before the check runs, `finish()` after it."""

    def __init__(self, session: SandboxSession, folder: str, *, timeout: float):
        self.session = session
        self.folder = folder
        # A name no one can find without being told it: the folder lets others pass, not list.
        self.pipe = f"{folder}/{secrets.token_hex(8)}"
        self.timeout = timeout
        self.secret = f"boltz-witness-end-{secrets.token_hex(16)}"
        self.data = bytearray()
        self.flooded = False
        self.result: ExecResult | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def folder_tar(self) -> bytes:
        """The folder of the pipe, as Docker puts it into the container."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            folder = tarfile.TarInfo(self.folder.lstrip("/"))
            folder.type, folder.mode = tarfile.DIRTYPE, 0o711
            folder.uid = folder.gid = WITNESS_UID
            tar.addfile(folder)
        return buffer.getvalue()

    def _take(self, stream: str, data: bytes) -> None:
        if stream != "stdout":
            return
        room = MAX_WITNESS_BYTES - len(self.data)
        if len(data) > room:
            self.flooded = True
        self.data.extend(data[: max(room, 0)])

    def _collect(self) -> None:
        try:
            self.result = self.session.sandbox.exec(
                tool_command(_COLLECT, [self.pipe], name="boltz-witness"),
                timeout=self.timeout,
                on_output=self._take,
                environment={**TOOL_ENV, "BOLTZ_WITNESS_END": self.secret},
                user=f"{WITNESS_UID}:{WITNESS_UID}",
                workdir="/",
            )
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def _as_witness(
        self, script: str, name: str, *, timeout: float, said: bytearray | None = None
    ) -> ExecResult:
        return self.session.sandbox.exec(
            tool_command(script, [self.pipe], name=name),
            timeout=timeout,
            on_output=lambda _stream, data: (
                said.extend(data[: 4096 - len(said)]) if said is not None else None
            ),
            environment={**TOOL_ENV, "BOLTZ_WITNESS_END": self.secret},
            user=f"{WITNESS_UID}:{WITNESS_UID}",
            workdir="/",
        )

    def start(self) -> None:
        self.session.put_archive(self.folder_tar())
        said = bytearray()
        made = self._as_witness(_MAKE, "boltz-witness-pipe", timeout=30, said=said)
        if made.exit_code != 0:
            if b"quota exceeded" in said.lower():  # the agent left no room for it
                raise DiskFull("the sandbox's disk is at its limit: no room for the witness pipe")
            raise InfrastructureError("could not make the check's witness pipe")
        self.thread = threading.Thread(target=self._collect, name="witness", daemon=True)
        self.thread.start()

    def finish(
        self, blame: Callable[[str], bool], secret: bytes | None = None
    ) -> tuple[list[WitnessRun], str]:
        """The pytest runs the witness saw, and a problem if its stream cannot be trusted.
        `blame`: the files whose skips are the agent's doing; `secret`: the canaries' (see
        parse_witness_stream)."""
        closed = self._as_witness(_CLOSE, "boltz-witness-close", timeout=30)
        if self.thread is not None:
            self.thread.join(timeout=60)
        if self.error is not None:
            if isinstance(self.error, InfrastructureError):
                raise self.error
            raise InfrastructureError(f"the check's witness collector failed: {self.error!r}")
        complete = (
            closed.exit_code == 0
            and self.result is not None
            and self.result.exit_code == 0
            and not self.flooded
        )
        return parse_witness_stream(bytes(self.data), complete=complete, blame=blame, secret=secret)

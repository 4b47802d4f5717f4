"""A second Docker daemon on this machine, as a second Docker host for tests: its own socket, pid
file, exec root, data root and cgroup parent, named after the test process, so that two test
processes (pytest-xdist) each start their own and never share one. It is started as the
machine's daemon is (scripts/services.sh start): no bridge, no iptables; on a btrfs of its own
with simple quotas when the machine's daemon is on btrfs, with gVisor's runtime when the machine
has it. The sandbox image is loaded into it from
the machine's (`docker save | docker load`: no registry here).

Used by tests/test_container_faults.py (a daemon restarted mid-attempt) and tests/test_two_hosts.py
(a second host with its own worker).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import docker
from django.conf import settings

from boltz_web.testing import process_tag

RUNSC = "/usr/local/lib/boltz/runsc"  # scripts/services.sh's wrapper, where gVisor is installed


def _machine_info() -> dict:
    with docker.APIClient(timeout=30) as api:
        return api.info()


class SecondDaemon:
    """One dockerd of this test process's own. `start()`, `stop()` (every container stops with
    it, as a restart's first half), `remove()` at the end: its containers, the daemon, its
    folders."""

    def __init__(self, role: str):
        self.name = f"boltz-test-{role}-{process_tag(os.getpid())}"
        self.socket = f"/run/{self.name}.sock"
        self.url = f"unix://{self.socket}"
        self.pidfile = Path(f"/run/{self.name}.pid")
        self.exec_root = Path(f"/run/{self.name}")
        self.btrfs = _machine_info().get("Driver") == "btrfs"
        # On btrfs when the machine's daemon is (with simple quotas, so a sandbox's disk limit
        # holds), but a btrfs of its own (a sparse file, mounted by loop), never the machine's:
        # dockerd's btrfs driver turns quotas off on its whole file system when it stops,
        # which on the machine's would leave its daemon failing every sandbox with a disk
        # limit ("Failed to limit qgroup").
        self.data_root = Path("/var/lib") / self.name
        self.disk_file = Path("/var/lib") / f"{self.name}.btrfs"
        self.log = Path(f"/tmp/{self.name}.log")
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        argv = [
            "dockerd",
            "-H",
            self.url,
            "--data-root",
            str(self.data_root),
            "--exec-root",
            str(self.exec_root),
            "--pidfile",
            str(self.pidfile),
            "--cgroup-parent",
            self.name,
            # No network at all, as the machine's daemon: no bridge, no iptables, no forwarding.
            "--bridge=none",
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--shutdown-timeout=2",
        ]
        if self.btrfs:
            argv.append("--storage-driver=btrfs")
        if os.path.exists(RUNSC):
            argv.append(f"--add-runtime=runsc={RUNSC}")
        return argv

    def answers(self) -> bool:
        try:
            with docker.APIClient(base_url=self.url, timeout=5) as api:
                api.ping()
            return True
        except Exception:  # noqa: BLE001 - not (yet) answering, whatever the reason
            return False

    def api(self, timeout: int = 300) -> docker.APIClient:
        return docker.APIClient(base_url=self.url, timeout=timeout)

    def start(self, timeout: float = 60) -> None:
        self.exec_root.mkdir(parents=True, exist_ok=True)
        self.data_root.mkdir(parents=True, exist_ok=True)
        if self.btrfs:
            if not os.path.ismount(self.data_root):
                subprocess.run(["truncate", "-s", "8G", str(self.disk_file)], check=True)
                subprocess.run(["mkfs.btrfs", "-q", "-f", str(self.disk_file)], check=True)
                subprocess.run(
                    ["mount", "-o", "loop", str(self.disk_file), str(self.data_root)], check=True
                )
            _simple_quotas(self.data_root)  # again after each stop, which turned them off
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd {self.name} did not answer:\n{self._log_tail()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> None:
        """The daemon stops, and every container stops with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def load_image(self, image: str) -> None:
        """The machine's `image` in this daemon too, unless it has the same one already."""
        mine = docker.from_env().images.get(image).id
        with self.api() as api:
            try:
                if api.inspect_image(image)["Id"] == mine:
                    return
            except docker.errors.ImageNotFound:
                pass
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "-H", self.url, "load", "-q"],
            stdin=save.stdout,
            check=True,
            capture_output=True,
            timeout=600,
        )
        assert save.wait() == 0

    def containers(self, **filters) -> list[dict]:
        """This daemon's containers of this test run (all of them with `any_run=True`)."""
        labels = [f"boltz.instance={settings.BOLTZ_INSTANCE}"]
        with self.api(timeout=60) as api:
            return api.containers(all=True, filters={"label": labels, **filters})

    def remove(self) -> None:
        """Every container of this daemon removed, the daemon stopped and its folders gone."""
        if self.proc is None and not self.answers():
            with contextlib.suppress(RuntimeError):
                self.start()
        if self.answers():
            with self.api(timeout=120) as api:
                for container in api.containers(all=True):
                    with contextlib.suppress(docker.errors.APIError):
                        api.remove_container(container["Id"], force=True)
        self.stop()
        if os.path.ismount(self.data_root):
            subprocess.run(["umount", "-l", str(self.data_root)], check=False, timeout=120)
        self.disk_file.unlink(missing_ok=True)
        _remove_tree(self.data_root, btrfs=self.btrfs)
        if self.btrfs:  # the machine's daemon still holds a sandbox to a disk limit
            with docker.APIClient(timeout=120) as api:
                made = api.create_container(
                    settings.BOLTZ_DEFAULT_IMAGE,
                    command=["true"],
                    host_config=api.create_host_config(storage_opt={"size": "1G"}),
                    labels={"boltz.instance": settings.BOLTZ_INSTANCE},
                )
                api.remove_container(made["Id"], force=True)
        shutil.rmtree(self.exec_root, ignore_errors=True)
        for leftover in (self.pidfile, Path(self.socket)):
            leftover.unlink(missing_ok=True)

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def _remove_tree(root: Path, *, btrfs: bool) -> None:
    """A stopped daemon's data root, with the btrfs subvolumes its images and containers were."""
    subvolumes = root / "btrfs" / "subvolumes"
    if btrfs and subvolumes.is_dir() and shutil.which("btrfs"):
        for volume in subvolumes.iterdir():
            subprocess.run(
                ["btrfs", "subvolume", "delete", str(volume)], capture_output=True, timeout=120
            )
    shutil.rmtree(root, ignore_errors=True)


def _simple_quotas(root: Path) -> None:
    """btrfs simple quotas on the file system at `root`, as scripts/services.sh start puts on
    the machine's (Debian 12's btrfs-progs cannot ask for them, hence the ioctl)."""
    import fcntl
    import struct

    shown = subprocess.run(
        ["btrfs", "filesystem", "show", str(root)], capture_output=True, text=True, check=True
    ).stdout
    mode = Path("/sys/fs/btrfs") / shown.split("uuid: ")[1].split()[0] / "qgroups" / "mode"
    if mode.exists() and mode.read_text().strip() == "squota":
        return
    fd = os.open(root, os.O_RDONLY)
    try:
        if mode.exists():
            fcntl.ioctl(fd, 0xC0109428, struct.pack("QQ", 2, 0))  # BTRFS_QUOTA_CTL_DISABLE
        fcntl.ioctl(fd, 0xC0109428, struct.pack("QQ", 4, 0))  # ..._ENABLE_SIMPLE_QUOTA
    finally:
        os.close(fd)

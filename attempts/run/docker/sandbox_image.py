"""Build the default sandbox image without a registry: debootstrap, then `docker import`; and
from it the stand-in for registry base images (BOLTZ_STANDIN_IMAGE): the same Debian without
the sandbox user, its home, /workspace or Boltz's git settings, running as root in /."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from attempts.run.docker import runtime

# Bump when the recipe below changes: an image with another version is rebuilt.
RECIPE_VERSION = "1"
SUITE = "bookworm"
PACKAGES = ["python3", "python3-pytest", "git", "ca-certificates", "procps"]

_SETUP_SCRIPT = f"""
set -e
groupadd --gid {runtime.SANDBOX_UID} sandbox
useradd --uid {runtime.SANDBOX_UID} --gid {runtime.SANDBOX_UID} --create-home \\
    --shell /bin/bash sandbox
mkdir -p /workspace && chown sandbox:sandbox /workspace
git config --system user.name "Boltz agent"
git config --system user.email "agent@boltz.invalid"
git config --system safe.directory '*'
git config --system init.defaultBranch main
git config --system advice.detachedHead false
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/info/*
"""

IMAGE_CHANGES = [
    "USER sandbox",
    "WORKDIR /workspace",
    "ENV HOME=/home/sandbox",
    "ENV LANG=C.UTF-8",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV PYTHONDONTWRITEBYTECODE=1",
    'CMD ["sleep", "infinity"]',
    f"LABEL boltz.recipe={RECIPE_VERSION}",
]


STANDIN_RECIPE = "1"
_STANDIN_DOCKERFILE = f"""FROM {{image}}
USER root
RUN userdel --remove sandbox 2>/dev/null; rm -rf /workspace /home/sandbox /etc/gitconfig
WORKDIR /
ENV HOME=/root
CMD ["bash"]
LABEL boltz.standin={STANDIN_RECIPE}
"""


def _run(cmd: list[str], progress: Callable[[str], None]) -> None:
    progress("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        progress("  " + line.rstrip())
    if proc.wait() != 0:
        raise RuntimeError(f"{cmd[0]} failed with exit code {proc.returncode}")


def is_current(name: str) -> bool:
    labels = runtime.image_labels(name)
    return labels is not None and labels.get("boltz.recipe") == RECIPE_VERSION


def build_default_image(
    name: str | None = None,
    *,
    force: bool = False,
    mirror: str | None = None,
    progress: Callable[[str], None] = print,
) -> bool:
    """Build `name` (default BOLTZ_DEFAULT_IMAGE) unless it is there already. True if built."""
    name = name or settings.BOLTZ_DEFAULT_IMAGE
    repository, _, tag = name.partition(":")
    if not force and is_current(name):
        progress(f"image {name} is present (recipe {RECIPE_VERSION}); nothing to do")
        return False
    for tool in ("debootstrap", "chroot", "tar"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise RuntimeError(f"{tool} is not installed (Debian: apt-get install debootstrap)")
    mirror = mirror or settings.BOLTZ_DEBIAN_MIRROR
    started = time.monotonic()
    settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="boltz-image-", dir=settings.DATA_DIR))
    try:
        rootfs = work / "rootfs"
        progress(f"[1/3] debootstrap {SUITE} with {', '.join(PACKAGES)} from {mirror}")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(rootfs),
                mirror,
            ],
            progress,
        )
        progress("[2/3] adding the sandbox user (uid 1000) and /workspace")
        _run(["chroot", str(rootfs), "/bin/sh", "-c", _SETUP_SCRIPT], progress)
        tarball = work / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], progress)
        progress(f"[3/3] docker import as {name}")
        runtime.import_image(
            str(tarball), repository=repository, tag=tag or "latest", changes=IMAGE_CHANGES
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"built {name} in {time.monotonic() - started:.0f}s")
    return True


def build_standin_image(
    name: str | None = None, *, force: bool = False, progress: Callable[[str], None] = print
) -> bool:
    """Build `name` (default BOLTZ_STANDIN_IMAGE) from the default image unless it is there
    already: a base for Harbor tasks' Dockerfiles that adds no user or working folder of its
    own. True if built."""
    name = name or settings.BOLTZ_STANDIN_IMAGE
    labels = runtime.image_labels(name)
    if not force and labels is not None and labels.get("boltz.standin") == STANDIN_RECIPE:
        progress(f"image {name} is present (stand-in recipe {STANDIN_RECIPE}); nothing to do")
        return False
    dockerfile = _STANDIN_DOCKERFILE.format(image=settings.BOLTZ_DEFAULT_IMAGE).encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    progress(f"building {name} from {settings.BOLTZ_DEFAULT_IMAGE} (no user, no /workspace)")
    runtime.build_image(
        gzip.compress(raw.getvalue(), mtime=0),
        tag=name,
        labels={"boltz.standin": STANDIN_RECIPE},
        on_line=lambda line: progress("  " + line),
    )
    return True

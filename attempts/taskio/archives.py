"""Unpacking uploaded archives (zip, tar, tar.gz) safely: nothing may land outside the target
folder, no link may point outside it, and the unpacked size is capped."""

from __future__ import annotations

import posixpath
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import BinaryIO

from django.conf import settings


class ArchiveRefused(ValueError):
    """An archive that is not safe or too large; the message says why."""


_UNPACKING_ERRORS = (
    OSError,
    EOFError,
    tarfile.TarError,
    zipfile.BadZipFile,
    KeyError,  # tarfile: a hard link to an entry the archive lacks
    ValueError,  # posixpath: a hard link to no name
    RecursionError,  # tarfile: hard links to each other, each copied from the other
)


def _check_name(name: str) -> str:
    if not name.strip("/"):
        raise ArchiveRefused(f"an entry has no name ({name!r})")
    clean = posixpath.normpath(name.replace("\\", "/"))
    if name.startswith(("/", "\\")) or clean == ".." or clean.startswith("../") or ":" in name[:3]:
        raise ArchiveRefused(f"{name!r} would land outside the archive's folder")
    return clean


def _check_link(name: str, target: str) -> None:
    if target.startswith("/"):
        raise ArchiveRefused(f"{name!r} links to {target!r}, outside the archive's folder")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../"):
        raise ArchiveRefused(f"{name!r} links to {target!r}, outside the archive's folder")


def safe_extract(source: BinaryIO | Path, dest: Path) -> Path:
    """Unpack a zip or tar (any compression) into `dest`, at most BOLTZ_MAX_UPLOAD_BYTES
    unpacked. Raises ArchiveRefused."""
    limit = settings.BOLTZ_MAX_UPLOAD_BYTES
    dest.mkdir(parents=True, exist_ok=True)
    handle = open(source, "rb") if isinstance(source, Path) else source  # noqa: SIM115
    try:
        handle.seek(0)
        if zipfile.is_zipfile(handle):
            handle.seek(0)
            _extract_zip(handle, dest, limit)
        else:
            handle.seek(0)
            _extract_tar(handle, dest, limit)
    except ArchiveRefused:
        raise
    except _UNPACKING_ERRORS as exc:
        # What an archive's own entries make fail: two entries of one name (a file and a
        # folder), a file named like the folder itself, links to entries it lacks or to each
        # other, a cut end.
        raise ArchiveRefused(f"could not be unpacked: {exc}") from None
    finally:
        if isinstance(source, Path):
            handle.close()
    return dest


def _extract_zip(handle, dest: Path, limit: int) -> None:
    try:
        archive = zipfile.ZipFile(handle)
    except zipfile.BadZipFile as exc:
        raise ArchiveRefused(f"not a readable zip: {exc}") from None
    total = 0
    for info in archive.infolist():
        name = _check_name(info.filename)
        mode = info.external_attr >> 16
        if (mode & 0o170000) == 0o120000:  # a symlink stored in a zip
            _check_link(name, archive.read(info).decode("utf-8", errors="replace"))
            raise ArchiveRefused(f"{info.filename!r} is a link: zip uploads may not hold links")
        total += info.file_size
        if total > limit:
            raise ArchiveRefused(f"unpacks to more than {limit} bytes (BOLTZ_MAX_UPLOAD_BYTES)")
        target = dest / name
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)


def _extract_tar(handle, dest: Path, limit: int) -> None:
    try:
        archive = tarfile.open(fileobj=handle, mode="r:*")  # noqa: SIM115 - closed below
    except tarfile.TarError as exc:
        raise ArchiveRefused(f"not a zip or tar archive: {exc}") from None
    total = 0
    with archive:
        members = archive.getmembers()
        for member in members:
            name = _check_name(member.name)
            if member.issym() or member.islnk():
                _check_link(
                    name,
                    member.linkname
                    if member.issym()
                    else posixpath.relpath(member.linkname, posixpath.dirname(name) or "."),
                )
            elif not (member.isfile() or member.isdir()):
                raise ArchiveRefused(f"{member.name!r} is not a file, folder or link")
            total += member.size
            if total > limit:
                raise ArchiveRefused(f"unpacks to more than {limit} bytes (BOLTZ_MAX_UPLOAD_BYTES)")
        archive.extractall(dest, members=members, filter="data")


def single_top_folder(root: Path) -> Path:
    """An archive of one folder (repo/...) is that folder; otherwise the root itself."""
    entries = [p for p in root.iterdir() if p.name not in ("__MACOSX",)]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return root

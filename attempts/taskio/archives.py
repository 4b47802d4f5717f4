"""Unpacking uploaded archives (zip; tar, plain or gzip, bzip2 or xz) safely and within bounds.

Nothing may land outside the target folder and no link may point outside it. An archive is read
entry by entry as a stream, never whole in memory, and refused as soon as it passes a limit
(`ArchiveLimits`, from settings): more entries than BOLTZ_MAX_ARCHIVE_FILES, files adding up to
more than BOLTZ_MAX_UNPACKED_BYTES, or a stream expanding to more than BOLTZ_MAX_ARCHIVE_RATIO
times the archive's own size. Decompression stops there: a bomb costs no more than its limits.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import posixpath
import shutil
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

CHUNK = 1 << 16
# An archive expanding to less than this is never refused for its ratio: a small archive of
# repetitive text (a fixture of zeros) is no bomb.
RATIO_FLOOR = 1 << 20
# The most one entry's long name or pax header may hold (tarfile reads it whole).
MAX_HEADER_BYTES = 1 << 20
_HEADER_TYPES = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)
_COMPRESSIONS = (  # magic bytes, and the reader that decompresses as it is read
    (b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    (b"BZh", lambda f: bz2.BZ2File(f, "rb")),
    (b"\xfd7zXZ\x00", lambda f: lzma.LZMAFile(f, "rb")),  # noqa: SIM115 - entered by the caller
)
_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, zlib.error, lzma.LZMAError)


class ArchiveRefused(ValueError):
    """An archive that is not safe or not readable; the message says why."""


class ArchiveTooLarge(ArchiveRefused):
    """An archive past one of its limits; the message names the limit and its setting."""


@dataclass(frozen=True)
class ArchiveLimits:
    bytes: int  # the files' contents together
    files: int  # entries: files, folders and links
    ratio: int  # what the archive's stream expands to, over the archive's own size

    @classmethod
    def from_settings(cls) -> ArchiveLimits:
        return cls(
            bytes=settings.BOLTZ_MAX_UNPACKED_BYTES,
            files=settings.BOLTZ_MAX_ARCHIVE_FILES,
            ratio=settings.BOLTZ_MAX_ARCHIVE_RATIO,
        )

    def expanded_cap(self, packed: int) -> int:
        return max(int(self.ratio * packed), RATIO_FLOOR)


class _Tally:
    """Entries and bytes seen so far, refused past the limits."""

    def __init__(self, limits: ArchiveLimits):
        self.limits, self.files, self.bytes = limits, 0, 0

    def entry(self, size: int) -> None:
        self.files += 1
        if self.files > self.limits.files:
            raise ArchiveTooLarge(
                f"holds more than {self.limits.files} files, folders and links "
                "(BOLTZ_MAX_ARCHIVE_FILES)"
            )
        self.add(size)

    def add(self, size: int) -> None:
        self.bytes += size
        if self.bytes > self.limits.bytes:
            raise ArchiveTooLarge(
                f"unpacks to more than {self.limits.bytes} bytes (BOLTZ_MAX_UNPACKED_BYTES)"
            )


class _Expanding(io.RawIOBase):
    """A decompressed stream, counted: refused once it passes `cap` bytes (the ratio's)."""

    def __init__(self, stream: BinaryIO, *, cap: int, ratio: float, packed: int):
        super().__init__()
        self.stream, self.cap, self.ratio, self.packed, self.count = stream, cap, ratio, packed, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        if self.count > self.cap:
            raise _ratio_refusal(self.ratio, self.packed)
        return n


def _ratio_refusal(ratio: float, packed: int) -> ArchiveTooLarge:
    return ArchiveTooLarge(
        f"expands to more than {ratio:g} times its own size of {packed} bytes "
        "(BOLTZ_MAX_ARCHIVE_RATIO)"
    )


class _BoundedInfo(tarfile.TarInfo):
    """A tar header whose long name or pax data is refused past MAX_HEADER_BYTES, before
    tarfile reads it whole."""

    def _proc_member(self, tarfile_):
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise ArchiveTooLarge(
                f"an entry's header holds {self.size} bytes, more than {MAX_HEADER_BYTES}"
            )
        return super()._proc_member(tarfile_)


def _packed_size(handle: BinaryIO) -> int:
    handle.seek(0, io.SEEK_END)
    size = handle.tell()
    handle.seek(0)
    return size


@contextlib.contextmanager
def tar_entries(
    handle: BinaryIO, limits: ArchiveLimits | None = None
) -> Iterator[Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]]:
    """The entries of a tar (plain, gzip, bzip2 or xz) at the start of the seekable `handle`,
    read as a stream: (tar, member) pairs, each counted against `limits` (settings' by
    default) before its data is read, so `tar.extractfile(member)` or `tar.extract(member)`
    stays within them. Raises ArchiveRefused (ArchiveTooLarge past a limit)."""
    limits = limits or ArchiveLimits.from_settings()
    packed = _packed_size(handle)
    magic = handle.read(6)
    handle.seek(0)
    opener = next((o for m, o in _COMPRESSIONS if magic.startswith(m)), None)
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(opener(handle)) if opener else handle
        stream = _Expanding(raw, cap=limits.expanded_cap(packed), ratio=limits.ratio, packed=packed)
        try:
            tar = stack.enter_context(
                tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedInfo)  # noqa: SIM115
            )
        except ArchiveRefused:
            raise
        except _READ_ERRORS as exc:
            raise ArchiveRefused(f"not a zip or tar archive: {exc}") from None

        def entries() -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
            tally = _Tally(limits)
            while True:
                member = tar.next()
                if member is None:
                    return
                tally.entry(member.size)
                yield tar, member

        try:
            yield entries()
        except ArchiveRefused:
            raise
        except _READ_ERRORS as exc:
            raise ArchiveRefused(f"could not read or unpack it: {exc}") from None


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


def safe_extract(
    source: BinaryIO | Path, dest: Path, *, limits: ArchiveLimits | None = None
) -> Path:
    """Unpack a zip or tar (any compression) into the new folder `dest` within `limits`
    (BOLTZ_MAX_UNPACKED_BYTES, BOLTZ_MAX_ARCHIVE_FILES, BOLTZ_MAX_ARCHIVE_RATIO by default).
    Raises ArchiveRefused, and then `dest` is removed with what was unpacked so far."""
    limits = limits or ArchiveLimits.from_settings()
    dest.mkdir(parents=True, exist_ok=True)
    handle = open(source, "rb") if isinstance(source, Path) else source  # noqa: SIM115
    try:
        handle.seek(0)
        if zipfile.is_zipfile(handle):
            _extract_zip(handle, dest, limits)
        else:
            _extract_tar(handle, dest, limits)
    except ArchiveRefused:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except _UNPACKING_ERRORS as exc:
        # What an archive's own entries make fail: two entries of one name (a file and a
        # folder), a file named like the folder itself, links to entries it lacks or to each
        # other, a cut end.
        shutil.rmtree(dest, ignore_errors=True)
        raise ArchiveRefused(f"could not be unpacked: {exc}") from None
    finally:
        if isinstance(source, Path):
            handle.close()
    return dest


def _extract_zip(handle: BinaryIO, dest: Path, limits: ArchiveLimits) -> None:
    packed = _packed_size(handle)
    # The entry count from the end record, before zipfile reads the whole directory.
    end = zipfile._EndRecData(handle)  # noqa: SLF001 - the one reader of it
    if end and end[zipfile._ECD_ENTRIES_TOTAL] > limits.files:  # noqa: SLF001
        raise ArchiveTooLarge(
            f"holds more than {limits.files} files, folders and links (BOLTZ_MAX_ARCHIVE_FILES)"
        )
    handle.seek(0)
    try:
        archive = zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArchiveRefused(f"not a readable zip: {exc}") from None
    tally, cap, expanded = _Tally(limits), limits.expanded_cap(packed), 0
    with archive:
        for info in archive.infolist():
            name = _check_name(info.filename)
            if (info.external_attr >> 16) & 0o170000 == 0o120000:  # a symlink stored in a zip
                raise ArchiveRefused(f"{info.filename!r} is a link: zip uploads may not hold links")
            tally.entry(0)
            target = dest / name
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with archive.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(CHUNK):
                        tally.add(len(chunk))
                        expanded += len(chunk)
                        if expanded > cap:
                            raise _ratio_refusal(limits.ratio, packed)
                        out.write(chunk)
            except ArchiveRefused:
                raise
            except (*_READ_ERRORS, NotImplementedError, RuntimeError) as exc:
                raise ArchiveRefused(f"{info.filename!r} is not readable: {exc}") from None


def _extract_tar(handle: BinaryIO, dest: Path, limits: ArchiveLimits) -> None:
    with tar_entries(handle, limits) as entries:
        for tar, member in entries:
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
            try:
                # One entry, as it streams past; the data filter checks again on disk (links
                # through links already unpacked) and drops owners and special mode bits.
                tar.extract(member, dest, filter="data")
            except tarfile.FilterError as exc:
                raise ArchiveRefused(f"{member.name!r}: {exc}") from None


def single_top_folder(root: Path) -> Path:
    """An archive of one folder (repo/...) is that folder; otherwise the root itself."""
    entries = [p for p in root.iterdir() if p.name not in ("__MACOSX",)]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return root

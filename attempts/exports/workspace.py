"""The agent's final files as a safe tar.gz: only the files the diff covers, with names and
links that cannot leave the archive's folder, whatever the agent created. Pure logic.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO


class ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (a Docker archive stream)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


# The sandbox user (made by the image build, and the user every command runs as).
SANDBOX_UID = 1000


def sandbox_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Make a tar entry belong to the sandbox user (also a `tarfile.add` filter)."""
    info.uid = info.gid = SANDBOX_UID
    info.uname = info.gname = "sandbox"
    return info


def safe_relative(name: str) -> str | None:
    """`name` as a clean relative path, or None if it is absolute, climbs out, or holds a
    backslash (a path separator to some unpacking tools) or a NUL."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return None
    clean = posixpath.normpath(name)
    if clean in (".", "..") or clean.startswith("../"):
        return None
    return clean


def link_stays_inside(name: str, target: str, links: set[str] | frozenset = frozenset()) -> bool:
    """A link's target stays inside the archive's folder, and does not pass through another
    link of the archive (a chain of links could climb out where each one alone does not)."""
    if not target or target.startswith("/"):
        return False
    resolved = safe_relative(posixpath.normpath(posixpath.join(posixpath.dirname(name), target)))
    if resolved is None:
        return False
    parts = resolved.split("/")
    return not any("/".join(parts[:i]) in links for i in range(1, len(parts) + 1))


def filter_workspace(
    source: BinaryIO,
    out: BinaryIO,
    *,
    keep: set[str],
    prefix: str = "workspace/",
    max_bytes: int,
    links: set[str] | frozenset = frozenset(),
) -> tuple[int, list[dict]]:
    """Copy the members of the tar stream `source` whose path (below `prefix`) is in `keep`
    into a gzip tar on `out`. `links`: every symbolic link in the tree, so a link through
    another one is left out. Returns (content bytes copied, [{path, reason}] left out)."""
    omitted: list[dict] = []
    copied = 0
    kept: set[str] = set()
    with (
        tarfile.open(fileobj=source, mode="r|*") as tar_in,
        tarfile.open(fileobj=out, mode="w|gz") as tar_out,
    ):
        for member in tar_in:
            if not member.name.startswith(prefix):
                continue
            rel = member.name[len(prefix) :]
            if rel not in keep:
                continue
            clean = safe_relative(rel)
            if clean is None or clean != rel:
                omitted.append({"path": rel, "reason": "unsafe path"})
                continue
            info = tarfile.TarInfo(clean)
            info.mode, info.mtime = member.mode & 0o777, member.mtime
            sandbox_owned(info)
            if member.issym():
                if not link_stays_inside(clean, member.linkname, links):
                    omitted.append(
                        {
                            "path": clean,
                            "reason": f"link to {member.linkname[:200]} "
                            "points outside the workspace or through another link",
                        }
                    )
                    continue
                info.type, info.linkname = tarfile.SYMTYPE, member.linkname
                tar_out.addfile(info)
            elif member.islnk():
                target = (
                    member.linkname[len(prefix) :] if member.linkname.startswith(prefix) else ""
                )
                if target not in kept:
                    omitted.append({"path": clean, "reason": "hard link to a file left out"})
                    continue
                info.type, info.linkname = tarfile.LNKTYPE, target
                tar_out.addfile(info)
            elif member.isfile():
                if copied + member.size > max_bytes:
                    omitted.append({"path": clean, "reason": f"over the {max_bytes}-byte cap"})
                    continue
                info.size = member.size
                tar_out.addfile(info, tar_in.extractfile(member))
                copied += member.size
            else:
                omitted.append({"path": clean, "reason": "not a regular file or link"})
                continue
            kept.add(clean)
    for missing in sorted(keep - kept - {o["path"] for o in omitted}):
        omitted.append({"path": missing, "reason": "not found in the sandbox"})
    return copied, omitted

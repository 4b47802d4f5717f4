"""Tar archives for `files.upload` and `files.download`, with the standard library only.

`tar_directory` packs a local folder in memory. `safe_extract` unpacks a downloaded archive into a
folder and refuses anything that would land outside it: absolute names, `..`, links pointing
outside (checked again at extraction time, against the links already made), device files.
Owners are never applied and modes are limited to the permission bits.
"""

from __future__ import annotations

import io
import lzma
import os
import posixpath
import shutil
import stat
import tarfile
import zlib
from pathlib import Path

from boltz.errors import UnsafeArchive

__all__ = ["safe_extract", "tar_directory"]


def tar_directory(folder: str | os.PathLike[str]) -> bytes:
    """The contents of `folder` (not the folder itself) as an uncompressed tar, in memory.

    Symbolic links are stored as links. Owner names and ids are cleared.
    """
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for child in sorted(root.iterdir()):
            archive.add(str(child), arcname=child.name, recursive=True, filter=clean)
    return buffer.getvalue()


def _member_name(name: str) -> str:
    """The member's path, normalised, relative; raises when it is absolute or escapes."""
    if not name or "\x00" in name:
        raise UnsafeArchive(f"archive member with an invalid name: {name!r}")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or name.startswith("\\"):
        raise UnsafeArchive(f"archive member with an absolute path: {name!r}")
    normal = posixpath.normpath(name)
    if normal == ".." or normal.startswith("../"):
        raise UnsafeArchive(f"archive member escapes the target folder: {name!r}")
    return normal


def _check_members(members: list[tarfile.TarInfo]) -> None:
    """Refuse the whole archive, before anything is written, when a member is unsafe by name."""
    for member in members:
        name = _member_name(member.name)
        if member.issym():
            target = member.linkname
            if not target or target.startswith("/"):
                raise UnsafeArchive(
                    f"archive member {member.name!r} is a link to an absolute path {target!r}"
                )
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if joined == ".." or joined.startswith("../"):
                raise UnsafeArchive(
                    f"archive member {member.name!r} is a link pointing outside: {target!r}"
                )
        elif member.islnk():
            if member.linkname.startswith("/"):
                raise UnsafeArchive(
                    f"archive member {member.name!r} is a hard link to {member.linkname!r}"
                )
            _member_name(member.linkname)
        elif not (member.isfile() or member.isdir()):
            raise UnsafeArchive(
                f"archive member {member.name!r} is a device or special file, refused"
            )


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def safe_extract(data: bytes | io.BufferedIOBase, target: str | os.PathLike[str]) -> list[Path]:
    """Unpack the tar `data` into the folder `target` (made if missing); returns the paths made.

    Raises `UnsafeArchive` for a member that is absolute, escapes `target` (also through links
    already extracted), is a link pointing outside, or is a device or special file; for two
    members of one path that cannot both be made; and for data that is no readable tar.
    """
    fileobj = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    root_path = Path(target)
    root_path.mkdir(parents=True, exist_ok=True)
    try:
        return _extract(fileobj, os.path.realpath(root_path))
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise UnsafeArchive(f"the archive cannot be read: {exc}") from None
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
        # Two members of one path (a folder and a file), or a file where a folder must be.
        raise UnsafeArchive(f"archive members collide: {exc}") from None


def _extract(fileobj: io.BufferedIOBase | io.BytesIO, root: str) -> list[Path]:
    made: list[Path] = []
    with tarfile.open(fileobj=fileobj, mode="r:*") as archive:
        members = archive.getmembers()
        _check_members(members)
        directories: list[tuple[str, int]] = []
        for member in members:
            name = _member_name(member.name)
            if name == ".":
                continue
            destination = os.path.join(root, *name.split("/"))
            parent = os.path.realpath(os.path.dirname(destination))
            if not _inside(root, parent):
                raise UnsafeArchive(f"archive member {member.name!r} escapes through a link")
            os.makedirs(parent, exist_ok=True)
            destination = os.path.join(parent, os.path.basename(destination))
            replaceable = os.path.islink(destination) or (
                os.path.lexists(destination) and not os.path.isdir(destination)
            )
            if replaceable and not member.isdir():
                os.unlink(destination)  # never write through a link already there
            mode = member.mode & 0o777
            if member.isdir():
                if os.path.islink(destination):
                    raise UnsafeArchive(f"archive member {member.name!r} would follow a link")
                os.makedirs(destination, exist_ok=True)
                directories.append((destination, mode | 0o700))
            elif member.isfile():
                source = archive.extractfile(member)
                assert source is not None
                with source, open(destination, "xb") as out:
                    shutil.copyfileobj(source, out)
                os.chmod(destination, mode | 0o600)
            elif member.issym():
                resolved = os.path.realpath(os.path.join(parent, member.linkname))
                if not _inside(root, resolved):
                    raise UnsafeArchive(
                        f"archive member {member.name!r} is a link pointing outside: "
                        f"{member.linkname!r}"
                    )
                os.symlink(member.linkname, destination)
            elif member.islnk():
                source_path = os.path.realpath(
                    os.path.join(root, *_member_name(member.linkname).split("/"))
                )
                if not _inside(root, source_path) or not os.path.isfile(source_path):
                    raise UnsafeArchive(
                        f"archive member {member.name!r} is a hard link to "
                        f"{member.linkname!r}, which is not a file extracted here"
                    )
                shutil.copyfile(source_path, destination)
                os.chmod(destination, stat.S_IMODE(os.stat(source_path).st_mode))
            made.append(Path(destination))
        for directory, mode in reversed(directories):
            os.chmod(directory, mode)
    return made

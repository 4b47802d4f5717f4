"""Fuzzed readers of archives from outside: an uploaded zip or tar (task imports, the task form:
taskio.archives.safe_extract, fuzzed through that entry point only), an archive the SDK
downloads (boltz.archives.safe_extract), and the tar stream of an agent's working folder as
the worker reads it (run.changes.read_tree, tree_entries; exports.workspace.filter_workspace).

Each unpacks or refuses with its own error (ArchiveRefused, UnsafeArchive, ChangesUnavailable),
and nothing lands outside the target folder, whatever the members' names, kinds and links.
See tests/fuzz_inputs.py.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from attempts.exports.workspace import filter_workspace
from attempts.run import changes
from attempts.taskio.archives import ArchiveRefused, safe_extract
from boltz import archives as sdk_archives
from boltz.errors import BoltzError
from tests.fuzz_inputs import bytes_like, examples

EXAMPLES = examples(60)

_NAME_PARTS = ["a", "b", "..", ".", "", "x.py", "C:", "\\", "é", "\n", "-", " ", "a" * 120]
names = st.one_of(
    st.lists(st.sampled_from(_NAME_PARTS), min_size=1, max_size=4).map("/".join),
    st.lists(st.sampled_from(_NAME_PARTS), min_size=1, max_size=3).map(lambda p: "/" + "/".join(p)),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=20),
)
KINDS = ["file", "dir", "symlink", "hardlink", "fifo", "chardev"]
members = st.lists(
    st.tuples(names, st.sampled_from(KINDS), names, st.binary(max_size=64)), max_size=6
)


def tar_of(entries, *, prefix: str = "", compression: str = "") -> bytes:
    """A tar (PAX, `compression` "" or "gz") of the members as given, written as they are."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, link, data in entries:
            info = tarfile.TarInfo(prefix + name)
            info.mode = 0o755
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chardev": tarfile.CHRTYPE,
            }[kind]
            info.linkname = (prefix + link) if kind == "hardlink" else link
            tar.addfile(info)
    return buffer.getvalue()


def zip_of(entries) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name": that is the point
        for name, kind, link, data in entries:
            info = zipfile.ZipInfo(name + ("/" if kind == "dir" and name else ""))
            if kind == "symlink":
                info.external_attr = 0o120777 << 16
                data = link.encode("utf-8", "surrogateescape")
            archive.writestr(info, b"" if kind == "dir" else data)
    return buffer.getvalue()


@st.composite
def archives(draw, *, zips: bool = True) -> bytes:
    entries = draw(members)
    form = draw(st.sampled_from(["tar", "tgz", "zip", "bytes", "cut"] if zips else ["tar", "tgz"]))
    try:
        if form == "bytes":
            return draw(bytes_like())
        if form == "zip":
            return zip_of(entries)
        data = tar_of(entries, compression="gz" if form == "tgz" else "")
    except (ValueError, UnicodeError, tarfile.TarError, zipfile.BadZipFile):
        assume(False)  # the writer refuses it: no archive to read
    if form == "cut":
        return data[: draw(st.integers(0, len(data)))]
    return data


def assert_all_inside(box: Path, dest: Path, *, links_inside: bool = True) -> None:
    """The box holds the target folder and the untouched folder beside it, nothing else; no
    link in the target resolves out of it (`links_inside`: an agent's tree keeps its links as
    they are, for git to record, and is never written through them)."""
    assert sorted(p.name for p in box.iterdir()) == ["dest", "outside"]
    assert [p.name for p in (box / "outside").iterdir()] == ["keep"]
    assert (box / "outside" / "keep").read_bytes() == b"keep"
    real = os.path.realpath(dest)
    for path in dest.rglob("*") if links_inside else ():
        if path.is_symlink():
            resolved = os.path.realpath(path)
            assert resolved == real or resolved.startswith(real + os.sep), path


def _box(scratch: str) -> tuple[Path, Path]:
    box = Path(scratch)
    (box / "outside").mkdir()
    (box / "outside" / "keep").write_bytes(b"keep")
    return box, box / "dest"


_A_TAR = tar_of([("a", "file", "", b"x" * 600)])


@settings(max_examples=EXAMPLES, deadline=None)
@given(archives())
@example(tar_of([(".", "file", "", b"x")]))  # was IsADirectoryError: a file named like dest
@example(zip_of([("", "file", "", b"x")]))  # was IndexError: an entry without a name
@example(tar_of([("b", "file", "", b"x"), ("b/a", "file", "", b"y")]))  # NotADirectoryError
@example(tar_of([("a", "hardlink", "gone", b"")]))  # was KeyError: a link to no entry
@example(tar_of([("a", "hardlink", "", b"")]))  # was ValueError: a link to no name
@example(tar_of([("a", "hardlink", "b", b""), ("b", "hardlink", "a", b"")]))  # RecursionError
@example(_A_TAR[:700])  # was tarfile.ReadError: a tar cut short
def test_an_upload_is_unpacked_inside_or_refused(data):
    with tempfile.TemporaryDirectory() as scratch:
        box, dest = _box(scratch)
        try:
            safe_extract(io.BytesIO(data), dest)
        except ArchiveRefused as exc:
            assert str(exc)
            assert not dest.exists()  # what it had unpacked went with it
            dest.mkdir()
        assert_all_inside(box, dest)


@settings(max_examples=EXAMPLES, deadline=None)
@given(archives(zips=False))
@example(b"not a tar")  # was tarfile.ReadError
@example(tar_of([("\n", "dir", "", b""), ("\n", "file", "", b"x")]))  # was FileExistsError
def test_a_download_is_unpacked_inside_or_refused(data):
    with tempfile.TemporaryDirectory() as scratch:
        box, dest = _box(scratch)
        try:
            sdk_archives.safe_extract(data, dest)
        except BoltzError as exc:
            assert str(exc)
        assert_all_inside(box, dest)


@st.composite
def workspace_streams(draw) -> list[bytes]:
    """Docker's archive of /workspace: members under `workspace/`, read in chunks."""
    entries = draw(members)
    try:
        data = tar_of(entries, prefix=changes.PREFIX)
    except (ValueError, UnicodeError, tarfile.TarError):
        assume(False)
    if draw(st.booleans()):  # a stream cut short: the container died while it was read
        data = data[: draw(st.integers(0, len(data)))]
    size = draw(st.integers(1, 4096))
    return [data[i : i + size] for i in range(0, len(data), size)]


@settings(max_examples=EXAMPLES, deadline=None)
@given(workspace_streams(), st.integers(0, 200), st.integers(0, 8))
def test_a_workspace_stream_is_a_tree_or_changes_unavailable(chunks, max_bytes, max_files):
    with tempfile.TemporaryDirectory() as scratch:
        box, dest = _box(scratch)
        try:
            tree = changes.read_tree(chunks, dest, max_bytes=max_bytes, max_files=max_files)
        except changes.ChangesUnavailable as exc:
            assert exc.reason
        else:
            assert tree.bytes <= max_bytes and len(tree.paths) <= max_files
        assert_all_inside(box, dest, links_inside=False)


@settings(max_examples=EXAMPLES, deadline=None)
@given(workspace_streams(), st.integers(0, 200))
def test_a_workspace_stream_is_filtered_to_safe_members(chunks, max_bytes):
    data = b"".join(chunks)
    try:
        entries = changes.tree_entries([data])
    except tarfile.TarError:
        return  # a stream cut short: its reader says so (the container died under it)
    out = io.BytesIO()
    try:
        copied, omitted = filter_workspace(
            io.BytesIO(data), out, keep=set(entries), max_bytes=max_bytes
        )
    except tarfile.TarError:
        return
    assert copied <= max_bytes
    with tarfile.open(fileobj=io.BytesIO(out.getvalue()), mode="r:gz") as kept:
        for member in kept:
            assert not member.name.startswith("/") and ".." not in member.name.split("/")
            assert member.isfile() or member.isdir() or member.issym() or member.islnk()


@pytest.mark.parametrize("name", ["../x", "/etc/x", "a/../../x"])
def test_a_member_outside_is_refused_by_every_reader(name):
    data = tar_of([(name, "file", "", b"x")])
    with tempfile.TemporaryDirectory() as scratch:
        box, dest = _box(scratch)
        with pytest.raises(ArchiveRefused):
            safe_extract(io.BytesIO(data), dest)
        with pytest.raises(BoltzError):
            sdk_archives.safe_extract(data, box / "dest")
        assert_all_inside(box, dest)

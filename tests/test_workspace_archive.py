"""The workspace archive filter: only listed files, safe names and links, honest omissions."""

import io
import tarfile

from attempts.exports.workspace import (
    ChunkReader,
    filter_workspace,
    link_stays_inside,
    safe_relative,
)


def source_tar(entries) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(f"workspace/{name}")
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                info.type = {
                    "sym": tarfile.SYMTYPE,
                    "hard": tarfile.LNKTYPE,
                    "fifo": tarfile.FIFOTYPE,
                }[kind]
                info.linkname = payload
                tar.addfile(info)
    buffer.seek(0)
    return buffer


def run(entries, keep, max_bytes=10_000):
    out = io.BytesIO()
    copied, omitted = filter_workspace(source_tar(entries), out, keep=keep, max_bytes=max_bytes)
    out.seek(0)
    with tarfile.open(fileobj=out, mode="r:gz") as tar:
        members = {m.name: m for m in tar}
    return copied, {o["path"]: o["reason"] for o in omitted}, members


def test_only_listed_files_are_kept():
    copied, omitted, members = run(
        [("a.py", "file", b"x = 1\n"), (".git/HEAD", "file", b"ref"), ("build/o", "file", b"z")],
        keep={"a.py", "gone.txt"},
    )
    assert set(members) == {"a.py"} and copied == 6
    assert omitted == {"gone.txt": "not found in the sandbox"}


def test_links_that_leave_are_omitted_and_inside_links_kept():
    _, omitted, members = run(
        [
            ("a", "file", b"1"),
            ("in", "sym", "a"),
            ("abs", "sym", "/etc/passwd"),
            ("d/up", "sym", "../../x"),
            ("hard", "hard", "workspace/a"),
            ("pipe", "fifo", ""),
        ],
        keep={"a", "in", "abs", "d/up", "hard", "pipe"},
    )
    assert members["in"].issym() and members["hard"].islnk() and members["hard"].linkname == "a"
    assert set(omitted) == {"abs", "d/up", "pipe"}


def test_the_size_cap_is_honest():
    copied, omitted, members = run(
        [("a", "file", b"1" * 600), ("b", "file", b"2" * 600)], keep={"a", "b"}, max_bytes=1000
    )
    assert copied == 600 and set(members) == {"a"} and "1000-byte cap" in omitted["b"]


def test_path_checks():
    assert safe_relative("a/b") == "a/b"
    for bad in ("/etc/passwd", "../x", "a/../../x", "..\\x", "", "."):
        assert safe_relative(bad) is None, bad
    assert link_stays_inside("d/l", "../a") and not link_stays_inside("d/l", "../../a")


def test_chunk_reader_reads_across_chunks():
    reader = io.BufferedReader(ChunkReader([b"ab", b"", b"cde"]))
    assert reader.read() == b"abcde"

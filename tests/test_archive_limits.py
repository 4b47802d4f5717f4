"""Archives are unpacked entry by entry and refused past their limits (bytes unpacked, entries,
expansion over their own size), in bounded memory, with an error naming the limit and its setting;
what was unpacked of a refused archive is removed. Pure logic: no Docker, no database."""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import tarfile
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from attempts.taskio.archives import (
    MAX_HEADER_BYTES,
    RATIO_FLOOR,
    ArchiveLimits,
    ArchiveRefused,
    ArchiveTooLarge,
    safe_extract,
    tar_entries,
)

MIB = 1 << 20
DEFAULTS = ArchiveLimits(bytes=1 << 30, files=100_000, ratio=200)  # the settings' defaults


def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.GNU_FORMAT)


def gzip_bomb(size: int) -> bytes:
    """A tar.gz of one file of `size` zero bytes, built in milliseconds: one deflated MiB of
    zeros (ending on a full flush, so it stands alone) repeated, as `gzip -9` would write it."""
    assert size % MIB == 0
    header = _tar_header("zeros.bin", size)
    trailer = bytes(1024)  # the tar's two end blocks
    first = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = first.compress(header) + first.flush(zlib.Z_FULL_FLUSH)
    zeros = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = zeros.compress(bytes(MIB)) + zeros.flush(zlib.Z_FULL_FLUSH)
    last = zlib.compressobj(9, zlib.DEFLATED, -15)
    tail = last.compress(trailer) + last.flush(zlib.Z_FINISH)
    crc = zlib.crc32(header)
    for _ in range(size // MIB):
        crc = zlib.crc32(bytes(MIB), crc)
    crc = zlib.crc32(trailer, crc)
    total = len(header) + size + len(trailer)
    gz_header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return (
        gz_header
        + head
        + block * (size // MIB)
        + tail
        + struct.pack("<II", crc, total & 0xFFFFFFFF)
    )


def tar_of(files: dict[str, bytes], *, compress: str = "") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compress}") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_of(files: dict[str, bytes], *, level: int = 9) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def unpack(data: bytes, dest: Path, limits: ArchiveLimits = DEFAULTS) -> tuple[str, int]:
    """Unpack; the refusal's message ("" if none) and the peak memory it took, in bytes."""
    tracemalloc.start()
    try:
        safe_extract(io.BytesIO(data), dest, limits=limits)
        message = ""
    except ArchiveRefused as exc:
        message = str(exc)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return message, peak


def test_a_tar_bomb_of_the_issue_is_refused_for_its_ratio_in_bounded_memory(tmp_path, figure):
    bomb = gzip_bomb(200 * MIB)  # the issue's: about 204 KB that unpacks to 200 MiB
    assert len(bomb) < 210_000
    message, peak = unpack(bomb, tmp_path / "out")
    assert "expands to more than 200 times its own size" in message
    assert "BOLTZ_MAX_ARCHIVE_RATIO" in message
    assert peak < 4 * MIB  # streamed: never the 200 MiB, nor the 40 MiB it may expand to
    assert not (tmp_path / "out").exists()  # what was unpacked of it is gone
    figure(
        f"a {len(bomb) / 1000:.0f} KB tar.gz of {struct.unpack('<I', bomb[-4:])[0] / MIB:.0f} "
        f"MiB refused for its ratio, in {peak / MIB:.1f} MiB of memory; nothing left"
    )


def test_a_tar_bomb_within_its_ratio_is_refused_at_the_byte_limit(tmp_path):
    limits = ArchiveLimits(bytes=16 * MIB, files=100, ratio=10_000)
    message, peak = unpack(gzip_bomb(64 * MIB), tmp_path / "out", limits)
    assert message == f"unpacks to more than {16 * MIB} bytes (BOLTZ_MAX_UNPACKED_BYTES)"
    assert peak < 4 * MIB  # refused from its header's size, before its data is read


def test_bzip2_and_xz_bombs_are_refused_too(tmp_path):
    data = tar_of({"zeros.bin": bytes(16 * MIB)})
    for n, packed in enumerate((bz2.compress(data, 9), lzma.compress(data, preset=1))):
        assert len(packed) * 200 < 16 * MIB
        message, peak = unpack(packed, tmp_path / f"out{n}")
        assert "BOLTZ_MAX_ARCHIVE_RATIO" in message
        assert peak < 16 * MIB  # xz's own dictionary is most of it


def test_a_zip_bomb_is_refused_for_its_ratio_in_bounded_memory(tmp_path, figure):
    bomb = zip_of({"zeros.bin": bytes(64 * MIB)})
    assert len(bomb) < 100_000
    message, peak = unpack(bomb, tmp_path / "out")
    assert "expands to more than 200 times its own size" in message
    assert peak < 4 * MIB
    assert not (tmp_path / "out").exists()
    figure(
        f"a {len(bomb) / 1000:.0f} KB zip of "
        f"{zipfile.ZipFile(io.BytesIO(bomb)).getinfo('zeros.bin').file_size / MIB:.0f} MiB "
        f"refused for its ratio, in {peak / MIB:.1f} MiB of memory; nothing left"
    )


def test_a_zip_whose_headers_lie_about_sizes_is_held_to_its_real_bytes(tmp_path):
    bomb = bytearray(zip_of({"zeros.bin": bytes(8 * MIB)}))
    # Say 1 byte in the central directory's uncompressed size: zipfile stops there.
    central = bomb.rfind(b"PK\x01\x02")
    bomb[central + 24 : central + 28] = struct.pack("<I", 1)
    message, _ = unpack(bytes(bomb), tmp_path / "out", ArchiveLimits(MIB, 10, 10_000))
    assert message  # refused (a bad CRC or a size past the limit), never 8 MiB unpacked
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "zip"])
def test_many_tiny_files_are_refused_past_the_file_limit(tmp_path, kind):
    files = {f"f{i}.txt": b"x" for i in range(200)}
    data = zip_of(files) if kind == "zip" else tar_of(files, compress=kind[4:])
    limits = ArchiveLimits(bytes=1 << 30, files=199, ratio=200)
    message, _ = unpack(data, tmp_path / "out", limits)
    assert message == "holds more than 199 files, folders and links (BOLTZ_MAX_ARCHIVE_FILES)"
    assert not (tmp_path / "out").exists()
    limits = ArchiveLimits(bytes=1 << 30, files=200, ratio=200)
    assert unpack(data, tmp_path / "ok", limits)[0] == ""
    assert len(list((tmp_path / "ok").iterdir())) == 200


def test_the_ratio_spares_small_archives_and_is_exact_above_its_floor(tmp_path):
    small = tar_of({"zeros.bin": bytes(RATIO_FLOOR // 2)}, compress="gz")
    assert len(small) * 200 < RATIO_FLOOR // 2  # far past the ratio, but under the floor
    assert unpack(small, tmp_path / "small")[0] == ""
    files = {"zeros.bin": bytes(8 * MIB)}
    big = tar_of(files, compress="gz")
    ratio = len(tar_of(files)) / len(big)  # what its stream expands to, over its own size
    loose = ArchiveLimits(bytes=1 << 30, files=10, ratio=int(ratio) + 1)
    tight = ArchiveLimits(bytes=1 << 30, files=10, ratio=int(ratio) - 1)
    assert unpack(big, tmp_path / "loose", loose)[0] == ""
    assert (tmp_path / "loose" / "zeros.bin").stat().st_size == 8 * MIB
    assert "BOLTZ_MAX_ARCHIVE_RATIO" in unpack(big, tmp_path / "tight", tight)[0]


def test_a_plain_tar_over_the_byte_limit_is_refused_before_its_data_is_written(tmp_path):
    data = tar_of({"a.bin": bytes(MIB), "b.bin": bytes(2 * MIB)})
    limits = ArchiveLimits(bytes=2 * MIB, files=10, ratio=200)
    message, _ = unpack(data, tmp_path / "out", limits)
    assert message == f"unpacks to more than {2 * MIB} bytes (BOLTZ_MAX_UNPACKED_BYTES)"
    assert not (tmp_path / "out").exists()


def test_a_huge_pax_header_is_refused_before_it_is_read(tmp_path):
    info = tarfile.TarInfo("f.txt")
    info.pax_headers = {"comment": "x" * (MAX_HEADER_BYTES + 10)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b""))
    message, _ = unpack(buffer.getvalue(), tmp_path / "out")
    assert f"more than {MAX_HEADER_BYTES}" in message


def test_a_link_through_a_link_already_unpacked_cannot_climb_out(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo("d")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, target in (("d/up", ".."), ("x", "d/up/..")):  # each stays inside, alone
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
        evil = tarfile.TarInfo("x/evil")
        evil.size = 1
        tar.addfile(evil, io.BytesIO(b"!"))
    message, _ = unpack(buffer.getvalue(), tmp_path / "in" / "out")
    assert "outside the destination" in message
    assert not list(tmp_path.rglob("evil"))


def test_an_ordinary_archive_unpacks_whole(tmp_path):
    files = {"repo/calc.py": b"def add(a, b):\n    return a + b\n", "repo/tests/t.py": b"x = 1\n"}
    for n, data in enumerate((tar_of(files, compress="gz"), zip_of(files), tar_of(files))):
        assert unpack(data, tmp_path / str(n))[0] == ""
        for name, content in files.items():
            assert (tmp_path / str(n) / name).read_bytes() == content


def test_tar_entries_counts_every_entry_for_its_callers(tmp_path):
    """The worker's upload of an API archive reads through the same counted stream."""
    data = tar_of({f"f{i}": b"" for i in range(5)})
    with (
        pytest.raises(ArchiveTooLarge, match="BOLTZ_MAX_ARCHIVE_FILES"),
        tar_entries(io.BytesIO(data), ArchiveLimits(MIB, 4, 200)) as entries,
    ):
        for _ in entries:
            pass
    with tar_entries(io.BytesIO(data), ArchiveLimits(MIB, 5, 200)) as entries:
        assert [m.name for _, m in entries] == [f"f{i}" for i in range(5)]
    with (
        pytest.raises(ArchiveRefused, match="not a zip or tar archive"),
        tar_entries(io.BytesIO(b"not an archive at all" * 100)) as entries,
    ):
        list(entries)

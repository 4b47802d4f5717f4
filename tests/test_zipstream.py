"""Streaming zips: valid archives, built chunk by chunk in bounded memory."""

import io
import tracemalloc
import zipfile

from attempts.exports.zipstream import stream_zip


def test_it_builds_a_valid_zip_from_bytes_and_chunk_iterators():
    data = b"".join(stream_zip([("a.txt", b"hello"), ("b/c.bin", iter([b"x" * 10, b"y"]))]))
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.read("a.txt") == b"hello" and archive.read("b/c.bin") == b"x" * 10 + b"y"
    assert archive.testzip() is None


def test_memory_stays_bounded_for_a_large_entry():
    chunk = bytes(range(256)) * 4096  # 1 MiB

    def big():
        for _ in range(64):  # 64 MiB in all
            yield chunk

    tracemalloc.start()
    total, largest = 0, 0
    for part in stream_zip([("big.bin", big()), ("w.tar.gz", big())]):
        total += len(part)
        largest = max(largest, len(part))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert total > 64 * 1024 * 1024  # the stored .gz entry alone is 64 MiB
    assert largest < 4 * 1024 * 1024
    assert peak < 16 * 1024 * 1024

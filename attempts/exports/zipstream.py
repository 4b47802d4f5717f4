"""A zip archive written as a stream of byte chunks, with bounded memory. Standard library only:
zipfile writes to an unseekable sink with data descriptors, so nothing is ever held whole."""

from __future__ import annotations

import time
import zipfile
from collections.abc import Iterable, Iterator


class _Sink:
    """A write-only file that hands what is written to the generator below."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.size = 0

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


# An entry's content: bytes, or an iterable of byte chunks (read lazily).
Entry = tuple[str, bytes | Iterable[bytes]]


# Already compressed: deflating these again only costs time.
_STORED_SUFFIXES = (".gz", ".zip", ".xz", ".bz2")


def stream_zip(entries: Iterable[Entry]) -> Iterator[bytes]:
    sink = _Sink()
    with zipfile.ZipFile(sink, mode="w", allowZip64=True) as archive:
        for name, content in entries:
            info = zipfile.ZipInfo(name, date_time=time.gmtime()[:6])
            info.compress_type = (
                zipfile.ZIP_STORED if name.endswith(_STORED_SUFFIXES) else zipfile.ZIP_DEFLATED
            )
            info.external_attr = 0o644 << 16
            with archive.open(info, mode="w", force_zip64=True) as member:
                chunks = [content] if isinstance(content, bytes | bytearray) else content
                for chunk in chunks:
                    member.write(chunk)
                    if sink.size >= 256 * 1024:
                        yield sink.take()
                        sink.size = 0
            yield sink.take()
            sink.size = 0
    yield sink.take()

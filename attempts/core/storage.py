"""Helpers over Django's storage API (a local folder by default, S3-compatible in production)."""

from __future__ import annotations

import contextlib
import os

from django.core.files.storage import FileSystemStorage, default_storage


def delete_tree(prefix: str) -> int:
    """Delete every stored file under `prefix` (a folder name ending in '/'). Returns a count."""
    prefix = prefix.rstrip("/")
    removed = 0
    try:
        folders, files = default_storage.listdir(prefix)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for name in files:
        default_storage.delete(f"{prefix}/{name}")
        removed += 1
    for folder in folders:
        removed += delete_tree(f"{prefix}/{folder}")
    # A local folder keeps empty directories; a bucket has none to remove (and no `path`).
    if isinstance(default_storage, FileSystemStorage):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(default_storage.location, prefix))
    return removed


def iter_file(name: str, chunk_size: int = 1024 * 1024):
    """The bytes of a stored file, a chunk at a time."""
    with default_storage.open(name, "rb") as handle:
        while chunk := handle.read(chunk_size):
            yield chunk


def read_stored(entries: list[dict]) -> dict[str, bytes]:
    """Stored files listed as [{name, storage}] (agent files), read back as name -> bytes."""
    files = {}
    for entry in entries:
        with default_storage.open(entry["storage"], "rb") as handle:
            files[entry["name"]] = handle.read()
    return files

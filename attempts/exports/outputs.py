"""A command's whole raw output (stdout or stderr, as the worker stored it) as it leaves Boltz:
found by the name its links give it, and answered as plain text, never rendered as HTML. The
attempt's page and the API (`stdout_raw`, `stderr_raw`) link to it; each decides who may read."""

from __future__ import annotations

import posixpath

from django.core.files.storage import default_storage
from django.http import FileResponse


def raw_output_name(attempt_id: int, name: str) -> str | None:
    """The storage name of one of an attempt's raw outputs, or None when it has none so named."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    stored = posixpath.join(f"attempts/{attempt_id}/outputs", name)
    return stored if default_storage.exists(stored) else None


def raw_output_response(attempt_id: int, name: str) -> FileResponse | None:
    """The raw output as a download shown inline as text, or None when there is none."""
    stored = raw_output_name(attempt_id, name)
    if stored is None:
        return None
    response = FileResponse(
        default_storage.open(stored, "rb"), content_type="text/plain; charset=utf-8"
    )
    response["Content-Disposition"] = f'inline; filename="{posixpath.basename(stored)}"'
    return response

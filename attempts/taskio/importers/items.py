"""What every importer yields: one ImportItem per task it read, a refusal reported, never raised."""

from __future__ import annotations

from dataclasses import dataclass, field

from attempts.core.errors import InfrastructureError, TaskInvalid


@dataclass
class ImportItem:
    source: str  # where it came from: a folder, or FILE:LINE
    values: dict | None = None  # Task fields, when it could be read
    refused: str = ""  # why not, otherwise
    notes: list[str] = field(default_factory=list)  # keys ignored, images built or mapped


def guarded(source: str, build) -> ImportItem:
    """Run one task's reader; a refusal becomes a reported item, never an exception."""
    try:
        return ImportItem(source, values=build())
    except TaskInvalid as exc:
        return ImportItem(source, refused=f"{exc.field}: {exc.message}")
    except InfrastructureError as exc:
        return ImportItem(source, refused=f"could not check it: {exc.reason}")

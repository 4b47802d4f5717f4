"""Fields of the API's request schemas whose defaults and bounds come from dispatch/limits.py,
shown in the OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import Field

BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum"}


def documented(default: Any, description: str, **bounds: float) -> Any:
    """A field's default, and the bounds (`ge`, `gt`, `le`) the services hold it to, shown in
    the document but not checked by the schema: the service checks them itself and refuses a
    value outside with 400 and a detail naming the field, where the schema would answer 422."""
    return Field(
        default,
        description=description,
        json_schema_extra={BOUNDS[name]: value for name, value in bounds.items()},
    )

"""Fields of the API's request schemas whose defaults and bounds come from dispatch/limits.py,
shown in the OpenAPI document, and the rules the services hold them to that the document
states (a path's length, exactly one of two fields)."""

from __future__ import annotations

from typing import Any

from ninja import Query, Schema
from pydantic import ConfigDict, Field

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


MAX_PATH = 4096  # characters; sandboxes.workspace_path refuses longer ones
NO_NUL = r"^[^\x00]*$"
# A path in a request's body (an exec's cwd): its rule shown, and held by the service (400).
PATH_RULE = {"maxLength": MAX_PATH, "pattern": NO_NUL}


def path_query(default: Any = ...) -> Any:
    """A `path` query parameter: a file or folder in the sandbox, relative to its working
    folder unless absolute; one that is empty, longer than MAX_PATH or holds a NUL is refused
    (422) before any handler runs."""
    return Query(
        default,
        description="a path in the sandbox (relative to its working folder unless absolute)",
        min_length=1,
        max_length=MAX_PATH,
        pattern=NO_NUL,
    )


def one_of(names: tuple[str, ...]) -> dict:
    """A schema's rule that exactly one of the string fields `names` is given, not empty
    (the service refuses anything else with 400)."""
    return {
        "json_schema_extra": {
            "oneOf": [
                {
                    "required": [name],
                    "properties": {
                        name: {"minLength": 1},
                        **{other: {"maxLength": 0} for other in names if other != name},
                    },
                }
                for name in names
            ]
        }
    }


class Body(Schema):
    """A request's JSON body, its values taken as the document types them (pydantic's strict
    mode): `0` is not `false`, `true` not 1 and `"5"` not 5; a wrong type is refused with 422
    naming the field. A number with no fraction (`3.0`) is an integer, as JSON Schema has it:
    errors.ObjectBodies reads it as one."""

    model_config = ConfigDict(strict=True)

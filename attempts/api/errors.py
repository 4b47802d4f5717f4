"""The shape of every error the API answers, for the OpenAPI document."""

from __future__ import annotations

from ninja import Schema


class Error(Schema):
    detail: str
    code: str


ERRORS = {400: Error, 404: Error, 409: Error, 410: Error, 413: Error, 502: Error, 504: Error}

"""Django's PostgreSQL backend, storing text with NUL characters instead of failing on it.

PostgreSQL's text and jsonb cannot hold U+0000 (SQLite can): an agent's output with a NUL byte
in its live tail, a message or a label sent through the API would make the write fail, and with
it the step that wrote it. Here, on every connection, each NUL of a text value or of a string in
a JSON value is stored as U+FFFD, the character Boltz already stores for bytes that are not
UTF-8. The raw bytes stay in their files.
"""

from __future__ import annotations

import re

from django.db.backends.postgresql import base
from psycopg.types.json import Jsonb, JsonbBinaryDumper, JsonbDumper
from psycopg.types.string import StrBinaryDumper, StrDumperUnknown

NUL = "\x00"
REPLACEMENT = "\ufffd"
# A `\u0000` escape of JSON text: preceded by an even number of backslashes (`\\u0000` is a
# backslash followed by the letters "u0000", kept as it is).
_JSON_NUL = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")


def _text_dumper(dumper: type) -> type:
    class NulFreeStrDumper(dumper):
        def dump(self, obj: str):
            return super().dump(obj.replace(NUL, REPLACEMENT) if NUL in obj else obj)

    return NulFreeStrDumper


def _json_dumper(dumper: type) -> type:
    class NulFreeJsonbDumper(dumper):
        def dump(self, obj):
            data = super().dump(obj)
            if b"\\u0000" in data:
                data = _JSON_NUL.sub(rb"\1\\ufffd", bytes(data))
            return data

    return NulFreeJsonbDumper


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        adapters = connection.adapters
        # psycopg's own (its C ones cannot be subclassed), as it chooses them for str.
        adapters.register_dumper(str, _text_dumper(StrBinaryDumper))
        adapters.register_dumper(str, _text_dumper(StrDumperUnknown))
        adapters.register_dumper(Jsonb, _json_dumper(JsonbDumper))
        adapters.register_dumper(Jsonb, _json_dumper(JsonbBinaryDumper))
        return connection

"""The format of Boltz's log lines: plain text by default, one JSON object per line with
BOLTZ_LOG_FORMAT=json. A record's `fields` (given as `extra={"fields": {...}}`) become the JSON
object's keys, or `key=value` pairs after the message in text; either way a line is one line
(newlines and control characters in any value are escaped), so nothing a request or an agent
sent can forge a line of its own."""

from __future__ import annotations

import datetime
import json
import logging


def _plain(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if not text or any(c in text for c in ' "=') or not text.isprintable():
        return json.dumps(text)  # quoted, with \n and control characters escaped
    return text


class LineFormatter(logging.Formatter):
    def __init__(self, kind: str = "text") -> None:
        super().__init__()
        self.kind = kind

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        message = record.getMessage()
        error = self.formatException(record.exc_info) if record.exc_info else ""
        if self.kind == "json":
            line = {
                "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname,
                "logger": record.name,
                "message": message,
                **fields,
            }
            if error:
                line["error"] = error
            return json.dumps(line, default=str, ensure_ascii=False)
        text = (
            message.encode("unicode_escape").decode("ascii")
            if not message.isprintable()
            else message
        )
        parts = [when.strftime("%Y-%m-%d %H:%M:%S"), record.levelname, record.name, text]
        parts += [f"{key}={_plain(value)}" for key, value in fields.items()]
        line = " ".join(parts)
        return line + ("\n" + error if error else "")

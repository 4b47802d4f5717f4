"""Terminal colours in what a command printed (`pytest --color=yes`, `ls --color`, progress
bars): as escaped HTML spans with classes a stylesheet colours for light and dark mode, or
stripped to plain text. rich's ANSI decoder reads the SGR codes (16, 256 and true colours,
bold, dim, italic, underline); everything else a terminal would act on (cursor moves, titles,
hyperlinks, a sequence cut in half by the output's head and tail) is dropped, never shown. The
text is agent-written: every character of it is escaped, and the only markup added is
`<span class="ansi-…">`."""

from __future__ import annotations

import re
from html import escape

# Operating system commands (window titles, OSC 8 hyperlinks), ended by BEL or ST, or cut off.
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)")
# Control sequences (colours, cursor moves, erasing), and two-character escapes.
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# An escape cut off at the end of a kept head (or at the end of a live tail's chunk).
_CUT = re.compile(r"\x1b(?:\[[0-?]*[ -/]*)?$")
# An escape no decoder reads (rich leaves it in the text).
_LONE_ESC = re.compile(r"\x1b(?![\[\]0-?(@-Z\\-_])")
# Controls a page never shows (tab, newline and carriage return stay).
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# pytest's JUnit XML cannot hold ESC and writes it as the text `#x1B`.
_JUNIT_ESC = "#x1B["


def _unjunit(text: str) -> str:
    return text.replace(_JUNIT_ESC, "\x1b[") if _JUNIT_ESC in text else text


def strip_ansi(text: str, *, junit: bool = False) -> str:
    """`text` without terminal escapes or other controls (search, snippets, plain exports)."""
    if junit:
        text = _unjunit(text)
    if "\x1b" in text:
        text = _CSI.sub("", _OSC.sub("", text))
    return _CONTROLS.sub("", text)


def _classes(style) -> str:
    from rich.color import ColorSystem, ColorType

    names = []
    for prefix, color in (("f", style.color), ("b", style.bgcolor)):
        if color is not None and color.type is not ColorType.DEFAULT:
            number = color.downgrade(ColorSystem.STANDARD).number
            if number is not None:
                names.append(f"ansi-{prefix}{number}")
    for attr in ("bold", "dim", "italic", "underline"):
        if getattr(style, attr):
            names.append(f"ansi-{attr}")
    return " ".join(names)


def _line_html(decoder, line: str) -> str:
    decoded = decoder.decode_line(line)
    plain = decoded.plain
    parts, position = [], 0
    for span in sorted(decoded.spans, key=lambda s: s.start):
        if span.start > position:
            parts.append(escape(plain[position : span.start]))
        piece = escape(plain[span.start : span.end])
        classes = _classes(span.style) if not isinstance(span.style, str) else ""
        parts.append(f'<span class="{classes}">{piece}</span>' if classes else piece)
        position = max(position, span.end)
    parts.append(escape(plain[position:]))
    return "".join(parts)


def ansi_html(text: str, *, junit: bool = False) -> str:
    """`text` as HTML for a `<pre>`: escaped, its colours as spans (see the module's doc).
    Lines keep their endings; a line's carriage returns keep what the terminal would show last
    (a progress bar's final state), as a terminal does, only where the output has escapes."""
    if junit:
        text = _unjunit(text)
    if "\x1b" not in text:
        return escape(_CONTROLS.sub("", text))
    from rich.ansi import AnsiDecoder

    text = _CUT.sub("", _OSC.sub("", text))
    text = _LONE_ESC.sub("", _CONTROLS.sub(lambda m: m[0] if m[0] == "\x1b" else "", text))
    decoder = AnsiDecoder()  # a style carries over from one line to the next, as in a terminal
    out = []
    for line in text.split("\n"):
        ending = "\r" if line.endswith("\r") else ""
        out.append(_line_html(decoder, line[: len(line) - len(ending)]))
    return "\n".join(out).replace("\x1b", "")  # an escape no one could read: never shown

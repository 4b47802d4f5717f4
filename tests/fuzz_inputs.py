"""Hypothesis strategies shared by the fuzz tests (tests/test_fuzz_*.py): outside data as an
agent, a dataset or a client could write it, arbitrary and structured-but-wrong, always bounded
in size so that an example runs in milliseconds.

Every fuzz test states one property: the reader returns a valid result or raises the project's
own validation error, with a message; never a raw KeyError, TypeError, UnicodeDecodeError,
RecursionError, OverflowError or parser error, never a hang.
"""

from __future__ import annotations

import json
import math
import os

from hypothesis import strategies as st

# Examples per test are a few hundred at most, so that the fuzz suite takes under a minute on a
# loaded two-core machine; BOLTZ_FUZZ_SCALE=10 tries ten times as many (a deeper run by hand).
SCALE = max(1, int(os.environ.get("BOLTZ_FUZZ_SCALE") or 1))


def examples(count: int) -> int:
    return count * SCALE


# Inputs that broke a reader once, or that break many: nesting deeper than the parser's
# recursion, numbers longer than Python converts, bytes that are not UTF-8, entity bombs.
DEEP_JSON = b"[" * 5000 + b"]" * 5000
DEEP_OBJECT = b'{"a":' * 5000 + b"1" + b"}" * 5000
LONG_INTEGER = b"1" * 5000
BILLION_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
    + b"".join(
        b'<!ENTITY %c "%s">' % (ord(name), (b"&%c;" % ord(prev)) * 10)
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + b']><testsuite><testcase name="&i;"/></testsuite>'
)
EXTERNAL_ENTITY = (
    b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b'<testsuite><testcase name="&x;"/></testsuite>'
)
NOTABLE_BYTES = [
    b"",
    b"\x00",
    b"\xff\xfe\x00",
    b"\xef\xbb\xbf",  # a UTF-8 byte order mark alone
    b"\xc3\x28",  # not UTF-8
    DEEP_JSON,
    DEEP_OBJECT,
    LONG_INTEGER,
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    BILLION_LAUGHS,
    EXTERNAL_ENTITY,
]

# A float of every kind, the non-finite ones included (TOML and Python's json take them).
any_float = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    any_float,
    st.text(max_size=30),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def json_bytes(value) -> bytes:
    """`value` as JSON, NaN and Infinity written as Python's json writes (and reads) them."""
    return json.dumps(value).encode()


def bytes_like(*structured) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, text, the notable bytes above, and the given structured strategies."""
    return st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.sampled_from(NOTABLE_BYTES),
        *structured,
    )


# --- TOML -------------------------------------------------------------------------------------
# tomllib reads TOML and nothing in the venv writes it: a small writer of inline values, enough
# to give a reader every type TOML has (datetimes too), in every place.


def _toml_string(text: str) -> str:
    # TOML's basic strings take JSON's escapes (never \/, which json.dumps does not write), and
    # characters beyond the BMP as they are (TOML has no surrogate pairs); DEL must be escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


_toml_key = _toml_string


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return value.isoformat()  # a date, time or datetime: TOML writes them bare


def toml_text(table: dict) -> str:
    """A TOML document of `table` (its keys at the top, every value inline)."""
    return "".join(f"{_toml_key(k)} = {toml_value(v)}\n" for k, v in table.items())


toml_text_chars = st.characters(blacklist_categories=("Cs",))  # TOML strings hold no surrogate
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    any_float,
    st.text(toml_text_chars, max_size=20),
    st.datetimes(),
    st.dates(),
    st.times(),
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(toml_text_chars, min_size=1, max_size=8), inner, max_size=3),
    ),
    max_leaves=8,
)

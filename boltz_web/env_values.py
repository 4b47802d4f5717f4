"""Typed readers for settings from the environment. Bad values fail loudly at start-up."""

from __future__ import annotations

import ipaddress
import math
import os
import re

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$", re.IGNORECASE)
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?$")

HostOrNetwork = str | ipaddress.IPv4Network | ipaddress.IPv6Network


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a whole number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r}: must be at least {minimum}")
    return value


MAX_BYTES = 2**63 - 1  # the most any size may be (what a database's big integer holds)


def parse_bytes(raw: str | int) -> int:
    """'512m' -> 536870912. Plain numbers are bytes; k/m/g/t are powers of 1024. ValueError
    for anything else, and for a size past MAX_BYTES."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        number = raw
    else:
        match = _SIZE.match(str(raw))
        if not match:
            raise ValueError(f"{raw!r} is not a size (examples: 512m, 2g, 1048576)")
        scaled = float(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " ")
        number = int(scaled) if scaled <= MAX_BYTES else MAX_BYTES + 1  # inf: too large too
    if number > MAX_BYTES:
        raise ValueError(f"too large a size (at most {MAX_BYTES} bytes)")
    return number


def parse_seconds(raw: str | int | float) -> float:
    """'90' -> 90.0, '5m' -> 300.0, '7d' -> 604800.0. ValueError for anything else, and for
    a duration that is not a finite number ("nan", "inf", 1e999)."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            seconds = float(raw)
        except OverflowError:  # an int past any float
            seconds = math.inf
    else:
        match = _DURATION.match(str(raw))
        if not match:
            raise ValueError(f"{raw!r} is not a duration (examples: 90, 90s, 5m, 2h, 7d)")
        factor = {"s": 1, "m": 60, "h": 3600, "d": 86400}[(match.group(2) or "s").lower()]
        seconds = float(match.group(1)) * factor
    if not math.isfinite(seconds):
        raise ValueError("not a finite duration")
    return seconds


def parse_hosts_and_networks(raw: str) -> tuple[HostOrNetwork, ...]:
    """'hooks.internal, 10.0.0.0/8, 127.0.0.1, [::1]' -> host names (lower case, no final
    dot) and networks (an address alone is a network of one)."""
    found: list[HostOrNetwork] = []
    for item in str(raw).split(","):
        entry = item.strip()
        if not entry:
            continue
        bare = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
        try:
            found.append(ipaddress.ip_network(bare, strict=False))
            continue
        except ValueError:
            pass
        name = entry.lower().rstrip(".")
        numeric = re.fullmatch(r"0x[0-9a-f]*|[0-9]+", name.rsplit(".", 1)[-1])
        if not _HOST_NAME.match(name) or ".." in name or numeric:
            raise ValueError(
                f"{entry!r} is neither a host name nor an IP address or network "
                "(examples: hooks.internal, 10.0.0.0/8, 127.0.0.1, ::1)"
            )
        found.append(name)
    return tuple(found)


def _env_parsed(name: str, default: str, parse):
    raw = os.environ.get(name, default)
    try:
        return parse(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def env_bytes(name: str, default: str) -> int:
    return _env_parsed(name, default, parse_bytes)


def env_seconds(name: str, default: str) -> float:
    return _env_parsed(name, default, parse_seconds)


def env_hosts_and_networks(name: str, default: str) -> tuple[HostOrNetwork, ...]:
    return _env_parsed(name, default, parse_hosts_and_networks)

"""Typed readers for settings from the environment. Bad values fail loudly at start-up."""

from __future__ import annotations

import ipaddress
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


def parse_bytes(raw: str | int) -> int:
    """'512m' -> 536870912. Plain numbers are bytes; k/m/g/t are powers of 1024."""
    if isinstance(raw, int):
        return raw
    match = _SIZE.match(str(raw))
    if not match:
        raise ValueError(f"{raw!r} is not a size (examples: 512m, 2g, 1048576)")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * 1024 ** " kmgt".index(unit or " "))


def parse_seconds(raw: str | int | float) -> float:
    """'90' -> 90.0, '5m' -> 300.0, '7d' -> 604800.0."""
    if isinstance(raw, int | float):
        return float(raw)
    match = _DURATION.match(str(raw))
    if not match:
        raise ValueError(f"{raw!r} is not a duration (examples: 90, 90s, 5m, 2h, 7d)")
    factor = {"s": 1, "m": 60, "h": 3600, "d": 86400}[(match.group(2) or "s").lower()]
    return float(match.group(1)) * factor


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

"""Where a callback may go: an http(s) URL without credentials, spaces or control characters,
whose host is a plain name or a plain IP address and resolves only to public internet
addresses, or is one the operator allows (`BOLTZ_CALLBACK_ALLOW`: host names and networks).

The same check runs when a callback URL is given (the API answers 400 with the reason) and
again before each delivery (a name may resolve elsewhere by then); a delivery connects to the
address this check found, so the name is never resolved a second time.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from attempts.dispatch.errors import InvalidRequest

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]

MAX_URL_LENGTH = 1000
RESOLVE_TIMEOUT = 5.0
ALLOW_SETTING = "BOLTZ_CALLBACK_ALLOW"
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMBER = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_NETLOC = re.compile(r"^(\[[0-9a-z:.%]+\]|[^@:\[\]]+)(:[0-9]{1,5})?$", re.IGNORECASE)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix: the last 32 bits are IPv4
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_ALLOW = f"an operator can allow internal receivers with {ALLOW_SETTING}"
# One answer for a name that does not resolve and one that resolves to an internal address,
# so the check does not tell which internal names exist.
_NOT_PUBLIC = (
    "host {host!r} must resolve to public internet addresses only; it does not resolve, or "
    "it resolves to a loopback, private, link-local or other non-public address; " + _ALLOW
)


@dataclass(frozen=True)
class Target:
    """A callback URL as checked: the delivery goes to `address`, naming `host` (the Host
    header and, over https, the name the certificate must hold)."""

    url: str
    scheme: str
    host: str
    netloc: str
    port: int
    address: str

    @property
    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address: nothing resolves it again."""
        where = f"[{self.address}]" if ":" in self.address else self.address
        parts = urlsplit(self.url)
        return urlunsplit((self.scheme, f"{where}:{self.port}", parts.path, parts.query, ""))

    @property
    def extensions(self) -> dict:
        return {"sni_hostname": self.host} if self.scheme == "https" else {}


def _refuse(message: str) -> InvalidRequest:
    return InvalidRequest("callback_url", message)


def why_not_public(address: Address) -> str | None:
    """What keeps `address` from being a public internet address (None when it is one)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return "an IPv6 address with a zone"
        if address.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        inner, how = None, ""
        if address in _NAT64:
            inner, how = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"
        elif address.sixtofour is not None:
            inner, how = address.sixtofour, "6to4"
        if inner is not None:
            reason = why_not_public(inner)
            return f"{how} of {inner}, {reason}" if reason else None
    kinds = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unique local", address.version == 6 and address in _UNIQUE_LOCAL),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("shared (carrier-grade NAT)", address.version == 4 and address in _SHARED),
        ("site-local", address.version == 6 and address.is_site_local),
        ("not globally routable", not address.is_global),
    )
    return next((f"{name} address" for name, found in kinds if found), None)


def resolve_host(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (none if it does not within RESOLVE_TIMEOUT)."""
    found: list[str] = []

    def look() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return
        found.extend(str(info[4][0]) for info in infos)

    lookup = threading.Thread(target=look, name="boltz-resolve", daemon=True)
    lookup.start()
    lookup.join(RESOLVE_TIMEOUT)
    return [] if lookup.is_alive() else list(dict.fromkeys(found))


def callback_target(url: str, *, resolve: Resolver = resolve_host, allow=None) -> Target:
    """`url` as a Target whose address may receive callbacks, or InvalidRequest saying why
    not. `allow`: the allowed host names and networks (default: the setting)."""
    allow = settings.BOLTZ_CALLBACK_ALLOW if allow is None else allow
    if len(url) > MAX_URL_LENGTH:
        raise _refuse(f"give a URL of at most {MAX_URL_LENGTH} characters")
    if any(not 0x21 <= ord(c) <= 0x7E or c == "\\" for c in url):
        raise _refuse(
            "no spaces, control characters (such as a line break), backslashes or non-ASCII "
            "characters: percent-encode them in the path, write a host name in ASCII"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise _refuse("not a URL (a port is a number from 1 to 65535)") from None
    if parts.scheme not in ("http", "https"):
        raise _refuse("give an http:// or https:// URL")
    if "@" in parts.netloc:
        raise _refuse("no user name or password in the URL: the body is signed instead")
    if not parts.hostname:
        raise _refuse("the URL has no host")
    if not _NETLOC.match(parts.netloc):
        raise _refuse("write the host and port as host:port, an IPv6 address as [address]")
    if port == 0:
        raise _refuse("a port is a number from 1 to 65535")
    port = port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname  # lower case, without the brackets of an IPv6 address
    literal = _address_literal(host, bracketed=parts.netloc.startswith("["))
    name = host.rstrip(".")
    if literal is None and name in {a for a in allow if isinstance(a, str)}:
        addresses = _resolved(host, port, resolve)
        return Target(url, parts.scheme, host, parts.netloc, port, str(addresses[0]))
    networks = [a for a in allow if not isinstance(a, str)]
    if literal is not None:
        reason = None if _in(literal, networks) else why_not_public(literal)
        if reason:
            raise _refuse(f"{literal} is not a public internet address ({reason}); {_ALLOW}")
        return Target(url, parts.scheme, host, parts.netloc, port, str(literal))
    addresses = _resolved(host, port, resolve)
    if any(not _in(a, networks) and why_not_public(a) for a in addresses):
        raise _refuse(_NOT_PUBLIC.format(host=host))
    return Target(url, parts.scheme, host, parts.netloc, port, str(addresses[0]))


def _address_literal(host: str, *, bracketed: bool) -> Address | None:
    """The address a host written as one stands for; None for a host name. Only plain forms
    are taken (a.b.c.d and [v6]): 0x7f000001, 2130706433, 0177.0.0.1 and 127.1 are refused,
    as resolvers read them differently."""
    if bracketed:
        if "%" in host:
            raise _refuse("no zone in an IPv6 address")
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise _refuse(f"[{host}] is not an IPv6 address") from None
    name = host[:-1] if host.endswith(".") else host
    if _NUMBER.match(name.rsplit(".", 1)[-1]):
        try:
            return ipaddress.IPv4Address(host)  # strict: four decimal numbers, no leading zeros
        except ValueError:
            raise _refuse(
                f"{host!r} is not written as an IP address is: give four decimal numbers "
                "(a.b.c.d, no leading zeros) or a host name"
            ) from None
    if len(name) > 253 or not all(_LABEL.match(label) for label in name.split(".")):
        raise _refuse(f"{host!r} is not a host name (letters, digits, '-' and '.' only)")
    return None


def _resolved(host: str, port: int, resolve: Resolver) -> list[Address]:
    addresses = []
    for found in resolve(host, port):
        try:
            addresses.append(ipaddress.ip_address(found))
        except ValueError:
            continue  # not an address at all: left out
    if not addresses:
        raise _refuse(_NOT_PUBLIC.format(host=host))
    return addresses


def _in(address: Address, networks) -> bool:
    return any(address.version == n.version and address in n for n in networks)

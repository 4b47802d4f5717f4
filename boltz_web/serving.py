"""Django's development server (runserver, which `make demo` and the tests serve with) without
the 40 ms Nagle / delayed-ACK stall on every answer of a kept-alive connection: it writes an
answer's headers and body in separate sends, so each accepted socket gets TCP_NODELAY."""

from __future__ import annotations

import contextlib
import socket

from django.core.servers import basehttp


def no_delay() -> None:
    handler = basehttp.WSGIRequestHandler
    if getattr(handler, "_boltz_no_delay", False):
        return
    setup = handler.setup

    def setup_no_delay(self) -> None:
        setup(self)
        with contextlib.suppress(OSError):  # not TCP (a Unix socket): nothing to do
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    handler.setup = setup_no_delay
    handler._boltz_no_delay = True

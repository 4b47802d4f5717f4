"""Gzip for pages and JSON answers, never for streams: Django's GZipMiddleware would hold a
streamed answer's chunks in its compressor (a live ndjson exec stream would stall) and spend
CPU on downloads that are already compressed (zip exports) or stored files."""

from __future__ import annotations

from django.middleware.gzip import GZipMiddleware

COMPRESSIBLE = ("text/", "application/json", "application/javascript", "image/svg+xml")


class PageGZipMiddleware(GZipMiddleware):
    def process_response(self, request, response):
        if response.streaming:
            return response
        if not response.get("Content-Type", "").startswith(COMPRESSIBLE):
            return response
        return super().process_response(request, response)

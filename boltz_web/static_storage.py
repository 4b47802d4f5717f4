"""Static files with content-hashed names (cached for a year by WhiteNoise) once `collectstatic`
has written its manifest; without one (a checkout that has not run it, the test run) the plain
names, which WhiteNoise serves straight from static/ (WHITENOISE_USE_FINDERS)."""

from __future__ import annotations

import os

from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    def stored_name(self, name: str) -> str:
        if not self.hashed_files:  # no manifest here: collectstatic has not run
            return name
        try:
            return super().stored_name(name)
        except ValueError:  # a file added since the last collectstatic: its plain name
            return name


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, without its warning about a STATIC_ROOT that collectstatic has not made yet
    (the files then come from static/ itself)."""

    def add_files(self, root, prefix=None):
        if self.autorefresh or os.path.isdir(root):
            super().add_files(root, prefix)

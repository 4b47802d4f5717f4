"""Where Boltz keeps its files (raw outputs, diffs, workspaces, uploads): Django's default
storage, a local folder (MEDIA_ROOT) or, with BOLTZ_STORAGE=s3, an S3-compatible bucket through
django-storages, so the web process and workers on other machines see the same files.

Read from the environment once, at start-up; a bad or missing value is an ImproperlyConfigured
naming the variable to fix. Credentials are boto3's own: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or an instance role when neither is set.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

LOCAL_BACKEND = "django.core.files.storage.FileSystemStorage"
S3_BACKEND = "storages.backends.s3.S3Storage"
KINDS = ("local", "s3")
ADDRESSING_STYLES = ("auto", "path", "virtual")
# S3's rules for bucket names (3-63 characters: lower-case letters, digits, dots, hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# A file read from S3 is spooled: in memory up to this size, then to a temporary file (a
# workspace archive of hundreds of megabytes never sits in a process's memory whole).
SPOOL_BYTES = 8 * 1024 * 1024


def default_storage_settings(env: Mapping[str, str]) -> dict:
    """STORAGES["default"] for this environment (os.environ in settings.py)."""
    kind = env.get("BOLTZ_STORAGE", "local").strip().lower() or "local"
    if kind not in KINDS:
        raise ImproperlyConfigured(
            f"BOLTZ_STORAGE={env['BOLTZ_STORAGE']!r}: expected 'local' (the default, a folder "
            "under BOLTZ_DATA_DIR) or 's3' (an S3-compatible bucket, BOLTZ_S3_BUCKET)"
        )
    stray = sorted(name for name in env if name.startswith("BOLTZ_S3_") and env[name].strip())
    if kind == "local":
        if stray:
            raise ImproperlyConfigured(
                f"{', '.join(stray)} set but BOLTZ_STORAGE is not 's3': set BOLTZ_STORAGE=s3 "
                "to keep files in the bucket, or unset them"
            )
        return {"BACKEND": LOCAL_BACKEND}
    return {"BACKEND": S3_BACKEND, "OPTIONS": _s3_options(env)}


def _s3_options(env: Mapping[str, str]) -> dict:
    if importlib.util.find_spec("storages") is None:
        raise ImproperlyConfigured(
            "BOLTZ_STORAGE=s3 needs django-storages with boto3: pip install 'boltz[s3]' "
            "(make install installs it)"
        )
    bucket = env.get("BOLTZ_S3_BUCKET", "").strip()
    if not bucket:
        raise ImproperlyConfigured("BOLTZ_STORAGE=s3 needs BOLTZ_S3_BUCKET (the bucket's name)")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ImproperlyConfigured(
            f"BOLTZ_S3_BUCKET={bucket!r}: not a bucket name (3-63 characters: lower-case "
            "letters, digits, dots and hyphens, starting and ending with a letter or digit)"
        )
    endpoint = env.get("BOLTZ_S3_ENDPOINT_URL", "").strip().rstrip("/")
    if endpoint and not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", endpoint):
        raise ImproperlyConfigured(
            f"BOLTZ_S3_ENDPOINT_URL={endpoint!r}: expected an http:// or https:// URL "
            "(MinIO, Ceph, R2 ...), or unset for AWS S3"
        )
    style = env.get("BOLTZ_S3_ADDRESSING_STYLE", "").strip().lower()
    if style and style not in ADDRESSING_STYLES:
        raise ImproperlyConfigured(
            f"BOLTZ_S3_ADDRESSING_STYLE={style!r}: expected one of {', '.join(ADDRESSING_STYLES)}"
        )
    key_id = env.get("AWS_ACCESS_KEY_ID", "").strip()
    secret = env.get("AWS_SECRET_ACCESS_KEY", "").strip()
    if bool(key_id) != bool(secret):
        missing = "AWS_SECRET_ACCESS_KEY" if key_id else "AWS_ACCESS_KEY_ID"
        raise ImproperlyConfigured(
            f"BOLTZ_STORAGE=s3: {missing} is not set while its pair is: give both, or neither "
            "(an instance role)"
        )
    prefix = env.get("BOLTZ_S3_PREFIX", "").strip().strip("/")
    if prefix and (".." in prefix.split("/") or "\\" in prefix):
        raise ImproperlyConfigured(
            f"BOLTZ_S3_PREFIX={prefix!r}: a folder inside the bucket, like 'boltz' or "
            "'team/boltz' (no '..')"
        )
    return {
        "bucket_name": bucket,
        "endpoint_url": endpoint or None,
        "region_name": env.get("BOLTZ_S3_REGION", "").strip() or None,
        "location": prefix,
        # A self-hosted endpoint (MinIO, Ceph) rarely has a DNS name per bucket.
        "addressing_style": style or ("path" if endpoint else None),
        # As the local folder does: a name taken gets a new one, nothing is overwritten.
        "file_overwrite": False,
        "default_acl": None,  # the bucket's own policy: private unless the operator says so
        "querystring_auth": True,  # Boltz serves every file itself; no public URLs
        "max_memory_size": SPOOL_BYTES,
    }


def is_shared(storages: Mapping[str, dict]) -> bool:
    """Do other hosts see the default storage's files (anything but a local folder)?"""
    return storages["default"]["BACKEND"] != LOCAL_BACKEND

"""A task's image given by name (no Dockerfile to build it from) brought to a host that lacks
it, from a live host that has it, through the file storage: no registry is needed. The host
that lacks it asks the other's worker (its host queue) to `docker save` the image into the
storage, waits for the answer there, `docker load`s it and removes the copy. Live hosts are
asked in turn, those whose heartbeat listed the image first; when none has it, the attempt
ends as an infrastructure error saying where to load it.

Used by the director before a sandbox is made (run/director.py), as a task's Dockerfile is
built on a host that lacks its image (run/image_builds.py)."""

from __future__ import annotations

import json
import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from attempts.core.errors import InfrastructureError
from attempts.dispatch import queue as queueing
from attempts.dispatch.errors import WorkerUnreachable
from attempts.dispatch.hosts import heard_hosts
from attempts.run.docker import runtime

log = logging.getLogger(__name__)

FOLDER = "images"  # in the file storage: the copies in transit, and each request's answer
ANSWER_WAIT = 900.0  # seconds to wait for a host that listed the image (a large one: minutes)
UNLISTED_WAIT = 20.0  # ... and for one that did not
SPOOL_BYTES = 64 << 20  # a copy up to this size stays in memory on its way


@dataclass
class Brought:
    image: str
    source: str  # the host it came from
    size: int  # bytes of the copy
    seconds: float

    def __str__(self) -> str:
        return (
            f"loaded the image {self.image} on {settings.BOLTZ_HOST} from host {self.source} "
            f"({self.size / 1e6:.0f} MB in {self.seconds:.0f} s)"
        )


def _answer_name(request_id: str) -> str:
    return f"{FOLDER}/answers/{request_id}.json"


def export_image(image: str, request_id: str) -> None:
    """On the host asked: the image into the storage, and the answer saying where (or why
    not). Never raises: the asker waits for the answer."""
    answer: dict = {"host": settings.BOLTZ_HOST}
    try:
        if not runtime.image_exists(image):
            answer["error"] = f"host {settings.BOLTZ_HOST} does not have it"
        else:
            with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as copy:
                size = runtime.save_image(image, copy)
                copy.seek(0)
                slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in image)[:100]
                answer["file"] = default_storage.save(f"{FOLDER}/{slug}.tar", File(copy))
                answer["size"] = size
    except Exception as exc:  # noqa: BLE001 - said to the asker, whatever it was
        log.exception("exporting image %s for request %s failed", image, request_id)
        answer["error"] = f"host {settings.BOLTZ_HOST} could not save it: {exc}"
    default_storage.save(_answer_name(request_id), ContentFile(json.dumps(answer).encode()))


def _sources(image: str) -> list[tuple[str, float]]:
    """Live hosts other than this one, each with how long to wait for its answer: those that
    listed the image in their last heartbeat first, as long as a large image may take; then
    the others, briefly (one may have loaded it since, and a worker that is not busy answers
    at once that it has not)."""
    others = heard_hosts().exclude(name=settings.BOLTZ_HOST).values_list("name", "images")
    listed = [(name, ANSWER_WAIT) for name, images in others if image in (images or [])]
    return listed + [
        (name, UNLISTED_WAIT) for name, images in others if image not in (images or [])
    ]


def _wait_for(request_id: str, source: str, wait: float) -> dict:
    name = _answer_name(request_id)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if default_storage.exists(name):
            with default_storage.open(name, "rb") as handle:
                answer = json.load(handle)
            default_storage.delete(name)
            return answer
        if not heard_hosts().filter(name=source).exists():
            return {"error": f"host {source} went silent"}
        time.sleep(1)
    return {"error": f"host {source} did not answer within {wait:.0f} s"}


def bring_image(image: str, *, asking: Callable[[str], None] | None = None) -> Brought:
    """Load `image` on this host from another live host that has it (see the module)."""
    said = []
    for source, wait in _sources(image):
        if asking:
            asking(source)
        request_id = uuid.uuid4().hex
        began = time.monotonic()
        try:
            queueing.request_image(source, image, request_id)
        except WorkerUnreachable as refusal:
            said.append(f"{source}: {refusal}")
            continue
        answer = _wait_for(request_id, source, wait)
        if "file" not in answer:
            said.append(answer.get("error", f"{source}: no answer"))
            continue
        try:
            with default_storage.open(answer["file"], "rb") as copy:
                runtime.load_image(copy)
        finally:
            default_storage.delete(answer["file"])
        if runtime.image_exists(image):
            return Brought(image, source, int(answer.get("size") or 0), time.monotonic() - began)
        said.append(f"host {source}'s copy did not hold {image}")
    tried = "; ".join(said) or "no other worker host is live"
    raise InfrastructureError(
        f"the image {image} is not on host {settings.BOLTZ_HOST}, and no other host could give "
        f"it ({tried}): load it on a host (docker load), or give the task a Dockerfile"
    )

"""Sandboxes without a task: started from an image, on an empty repository, with no check.

Each image gets one task of its own (`image-...`) that holds its sandboxes, so they are
listed, reviewed and exported like any other attempt. Such a task has no check: a check of one
of its sandboxes is refused, and no attempt or pool can be started on it.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError
from django.utils.text import slugify

from attempts.core.errors import TaskInvalid
from attempts.models import Task
from attempts.taskio import repos
from attempts.taskio.folders import require_image

SOURCE_PREFIX = "image:"


def has_check(task: Task) -> bool:
    return bool(task.check_command.strip())


def require_check(task: Task) -> None:
    """TaskInvalid unless the task has a check (a task-less image sandbox's task has none)."""
    if not has_check(task):
        raise TaskInvalid(
            "task",
            f"{task.slug} holds sandboxes started from an image, without a task: it has no "
            "check to run",
        )


def image_task(image: str) -> Task:
    """The task that holds sandboxes started from `image` (made the first time)."""
    name = require_image(image.strip())
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    slug = f"image-{slugify(name.replace(':', '-').replace('/', '-'))[:80]}-{digest}"
    found = Task.objects.filter(slug=slug).first()
    if found is not None:
        return found
    # An empty repository, made as any folder's is: where storage is shared, a bundle every
    # host's worker can read (the web process may make this task, a worker runs it).
    with tempfile.TemporaryDirectory(dir=settings.DATA_DIR) as empty:
        repo_url = repos.repository_from_folder(Path(empty), slug, keep=True)
    commit = repos.resolve_ref(repo_url, "HEAD")
    try:
        return Task.objects.create(
            slug=slug,
            title=f"Sandbox from {name}"[:200],
            instruction=f"A sandbox started from the image {name}, without a task.",
            repo_url=repo_url,
            base_ref="HEAD",
            base_commit=commit,
            image=name,
            check_command="",
            source_dir=f"{SOURCE_PREFIX}{name}"[:1000],
        )
    except IntegrityError:  # made meanwhile by another request
        return Task.objects.get(slug=slug)

"""A task as one part of an attempt sees it: some of its values replaced (a multi-step task's
step, a separate verifier's container), everything else the task's own. Pure logic."""

from __future__ import annotations


class TaskView:
    """`task` with the given values over its own."""

    def __init__(self, task, **values):
        self._task = task
        self.__dict__.update(values)

    def __getattr__(self, name):
        return getattr(self._task, name)

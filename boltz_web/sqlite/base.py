"""Django's SQLite backend, with the writers of one process taking turns on a lock.

SQLite lets one writer at a time at the file. A writer that finds it taken waits in SQLite's
busy handler, which sleeps and retries: 1, 2, 5, 10, 15, 20, 25 ms and on. When the eight
threads of a pool step write at the same moment (each its step number and its timeline), the
last one waited about 90 ms that way, while the lock was free most of that time. Here writers
of the same process queue on a Python lock instead and go the moment it is free; writers of
other processes still meet in SQLite's busy handler, as before.

A transaction (`atomic`, which on SQLite begins in autocommit mode) holds the lock from its
BEGIN to its COMMIT or ROLLBACK; a write outside one holds it for that statement. Reads never
take it (the database is in WAL mode: readers do not wait for writers).
"""

from __future__ import annotations

import threading

from django.db.backends.sqlite3 import base

_WRITES = threading.RLock()
_WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _is_write(query: str) -> bool:
    return query.lstrip()[:7].upper().startswith(_WRITE_VERBS)


class Cursor(base.SQLiteCursorWrapper):
    def execute(self, query, params=None):
        if self.connection.in_transaction or not _is_write(query):
            return super().execute(query, params)
        with _WRITES:
            return super().execute(query, params)

    def executemany(self, query, param_list):
        if self.connection.in_transaction or not _is_write(query):
            return super().executemany(query, param_list)
        with _WRITES:
            return super().executemany(query, param_list)


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_writes = False

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=Cursor)

    def _start_transaction_under_autocommit(self):
        _WRITES.acquire()
        self._holds_writes = True
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writes()
            raise

    def _release_writes(self) -> None:
        if self._holds_writes:
            self._holds_writes = False
            _WRITES.release()

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._release_writes()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._release_writes()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._release_writes()

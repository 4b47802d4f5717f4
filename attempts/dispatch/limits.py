"""Defaults and limits of what the API takes and the worker does, each decided here once: the
API's schemas (so the OpenAPI document shows them), the services that check a request and the
worker that does it import them from here.

Limits an installation chooses (BOLTZ_MAX_FILE_BYTES, BOLTZ_SANDBOX_MAX_TTL, ...) are settings,
not these.
"""

from __future__ import annotations

# --- commands (an exec, a pool step's run) ------------------------------------------------------
EXEC_TIMEOUT = 600.0  # seconds a command may run when its caller gives no timeout
MAX_COMMAND_SECONDS = 24 * 3600.0  # the longest timeout a command may be given: a day
MAX_STAGE_SECONDS = 7 * 24 * 3600.0  # the longest a task's setup, agent or check may be given

# --- how long the web waits for a worker's answer ------------------------------------------------
OPERATION_MARGIN = 30.0  # room past an operation's own time before the web stops waiting
FILE_WAIT = 180.0  # a file read, written, listed or deleted
ARCHIVE_WAIT = 300.0  # a folder downloaded or uploaded as a tar
DIFF_WAIT = 600.0  # the changes of a live sandbox, read out and diffed

# --- sandboxes -----------------------------------------------------------------------------------
SANDBOX_WAIT = 60.0  # seconds a new sandbox waits for a host with room, unless told
MAX_SANDBOX_WAIT = 600.0  # a longer wait for room is cut to this
STARTING_GRACE = 60.0  # a sandbox that started within its wait has this much more to be live
CAPACITY_RETRY_AFTER = 10  # seconds a client refused for want of room is told to wait
CLOSE_WAIT = 900.0  # seconds a close waits for the sandbox's changes to be recorded (and checked)

# --- attempts ------------------------------------------------------------------------------------
MAX_ATTEMPTS_AT_ONCE = 100  # attempts one call may start
ATTEMPTS_WAIT = 600.0  # seconds a wait for attempts to end lasts, unless told
MAX_ATTEMPTS_WAIT = 3600.0  # the longest such a wait may be
MAX_WAIT_IDS = 1000  # attempts one wait may name

# --- pools ---------------------------------------------------------------------------------------
MAX_POOL_SIZE = 256  # environments of one pool
MAX_STEPS = 100  # steps an episode may take, unless its pool says
MAX_STEPS_LIMIT = 100_000  # the most a pool may allow
EPISODE_SECONDS = 3600.0  # an episode's time, unless its pool says
EPISODE_SANDBOX_MARGIN = 600.0  # an episode's sandbox lives this much past the episode's time
PATCH_TIMEOUT = 60.0  # seconds a step's patch may take to apply

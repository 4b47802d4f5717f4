"""Defaults and limits of what the API takes and the worker does, each decided here once: the
API's schemas (so the OpenAPI document shows them), the services that check a request and the
worker that does it import them from here.

Limits an installation chooses (BOLTZ_MAX_FILE_BYTES, BOLTZ_SANDBOX_MAX_TTL, ...) are settings,
not these.
"""

from __future__ import annotations

# --- ids -----------------------------------------------------------------------------------------
# Ids and numbers are 64-bit integers in the database: a larger one given in a URL or a body
# names nothing (404), and is never sent to the database, which cannot compare it.
MAX_ID = 2**63 - 1

# --- commands (an exec, a pool step's run) ------------------------------------------------------
EXEC_TIMEOUT = 600.0  # seconds a command may run when its caller gives no timeout
MAX_COMMAND_SECONDS = 24 * 3600.0  # the longest timeout a command may be given: a day
MAX_STAGE_SECONDS = 7 * 24 * 3600.0  # the longest a task's setup, agent or check may be given
# A command reaches the sandbox as arguments of a process (`/bin/sh -c COMMAND`, or its argv),
# and Linux takes at most 128 KiB in one argument (a string command is one; so is each NAME=value)
# and 2 MiB in all with the environment: a command (its argv's items together) and the variables
# a caller adds to its environment (together) may have these many bytes, each argument or
# variable at most MAX_ARG_BYTES. A longer script goes in as a file or as standard input.
MAX_ARG_BYTES = 128 * 1024
MAX_COMMAND_BYTES = 1536 * 1024
MAX_ENV_BYTES = 256 * 1024


def command_bytes(command: str | list[str]) -> int:
    """A command's size as the sandbox's kernel counts it: its argument strings, with their
    terminating NULs."""
    items = [command] if isinstance(command, str) else command
    return sum(len(str(item).encode("utf-8", errors="surrogatepass")) + 1 for item in items)


def _argument_too_long(items: list[str]) -> str:
    longest = max((command_bytes([item]) for item in items), default=0)
    if longest <= MAX_ARG_BYTES:
        return ""
    return (
        f"one argument of {longest} bytes, more than the {MAX_ARG_BYTES} one may have "
        "(MAX_ARG_BYTES): split it, or write it as a file and run that"
    )


def command_too_long(command: str | list[str]) -> str:
    """Why a command is more than a sandbox process takes, or "" when it is not."""
    size = command_bytes(command)
    if size <= MAX_COMMAND_BYTES:
        return _argument_too_long([command] if isinstance(command, str) else command)
    return (
        f"{size} bytes, more than the {MAX_COMMAND_BYTES} a command may have (MAX_COMMAND_BYTES):"
        " write a long script as a file and run that, or send it as standard input"
    )


def environment_too_long(env: dict[str, str]) -> str:
    """Why variables added to a command's environment are more than it takes, or ""."""
    size = command_bytes([f"{name}={value}" for name, value in env.items()])
    if size <= MAX_ENV_BYTES:
        return _argument_too_long([f"{name}={value}" for name, value in env.items()])
    return (
        f"{size} bytes of NAME=value, more than the {MAX_ENV_BYTES} a command's added "
        "environment may have (MAX_ENV_BYTES): pass large values in a file"
    )


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
UNREACHABLE_RETRY_AFTER = 5  # seconds a client refused because Redis is down is told to wait
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

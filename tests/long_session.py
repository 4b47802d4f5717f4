"""A long agent session seeded straight into the database: what 2,000-odd API calls leave on an
attempt's timeline (commands with coloured pytest output, their output events, chat messages,
file writes), between a start stage and a check stage. Shared by the attempt page's tests and
bench/pages.py, so the tests hold the page to the budget the benchmark measures."""

from __future__ import annotations

from datetime import timedelta

GREEN, RED, BOLD, RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[0m"
# The first command that fails is this far into the agent's calls (well past the first window).
FIRST_FAILING_CALL = 320
# Every this many-th pytest run after it fails too.
FAIL_EVERY = 7
NEEDLE = "needle-zebra-7731"


def stream(text: str) -> dict:
    return {"head": text, "tail": "", "bytes": len(text.encode()), "truncated": False, "utf8": True}


def pytest_output(call: int, failed: bool) -> str:
    dots = f"{GREEN}.{RESET}" * 3
    if failed:
        return (
            f"{dots}{RED}F{RESET}{GREEN}.{RESET}{RED}{BOLD}                                    "
            f"[100%]{RESET}\n{RED}FAILED{RESET} tests/test_{call % 40}.py::test_edge - "
            f"assert 2 == 3\n{RED}{BOLD}1 failed{RESET}, {GREEN}4 passed{RESET} in 0.04s\n"
        )
    return f"{dots}{GREEN}{BOLD}  [100%]{RESET}\n{GREEN}{BOLD}3 passed{RESET} in 0.02s\n"


def long_session_specs(total: int = 10_000, *, needle_at: int | None = None) -> list[tuple]:
    """(kind, actor, data) of `total` events in order. `needle_at`: the agent call whose
    output holds NEEDLE (None: none does)."""
    specs: list[tuple] = [
        ("lifecycle", "system", {"status": "starting", "message": "creating a sandbox"}),
        ("exec", "system", {"phase": "start", "exec": 1, "step": "setup", "command": "pip i"}),
        ("exec", "system", {"phase": "end", "exec": 1, "step": "setup", "command": "pip i",
                            "exit_code": 0, "duration": 0.4, "stdout": stream("ok\n")}),
        ("lifecycle", "system", {"status": "running", "message": "agent runs through the API"}),
    ]  # fmt: skip
    tail_size = 9
    number, call = 1, 0
    while len(specs) < total - tail_size:
        call += 1
        number += 1
        if call % 3 == 0:
            failed = call >= FIRST_FAILING_CALL and (call - FIRST_FAILING_CALL) % FAIL_EVERY == 0
            command = f"python -m pytest --color=yes -q tests/test_{call % 40}.py"
            text, code = pytest_output(call, failed), 1 if failed else 0
        else:
            command, text, code = f"cat src/mod{call % 97}.py", f"def f{call}():\n    return 1\n", 0
        if call == needle_at:
            text += f"{NEEDLE}\n"
        specs += [
            ("exec", "agent", {"phase": "start", "exec": number, "step": "api", "command": command}),
            ("output", "agent", {"exec": number, "stream": "stdout", "text": text}),
            ("exec", "agent", {"phase": "end", "exec": number, "step": "api", "command": command,
                               "exit_code": code, "duration": 0.05, "stdout": stream(text)}),
        ]  # fmt: skip
        if call % 10 == 0:
            specs.append(("message", "agent", {"role": "assistant", "text": f"step {call}"}))
    specs = specs[: total - tail_size]
    if specs[-1][0] == "exec" and specs[-1][2]["phase"] == "start":
        specs.pop()  # never leave a command without its end
    while len(specs) < total - tail_size:
        specs.append(("message", "agent", {"role": "assistant", "text": "thinking"}))
    check_out = pytest_output(0, True)
    check, reset = number + 2, number + 1
    specs += [
        ("lifecycle", "system", {"status": "checking", "message": "ending every process"}),
        ("file", "system", {"action": "diff", "files": 3, "bytes": 900, "truncated": False}),
        ("exec", "system", {"phase": "start", "exec": reset, "step": "reset",
                            "command": "reset 0 protected path(s) to the base"}),
        ("exec", "system", {"phase": "end", "exec": reset, "step": "reset",
                            "command": "reset 0 protected path(s) to the base", "exit_code": 0,
                            "duration": 0.1}),
        ("exec", "system", {"phase": "start", "exec": check, "step": "check",
                            "command": "pytest --color=yes -q tests"}),
        ("exec", "system", {"phase": "end", "exec": check, "step": "check",
                            "command": "pytest --color=yes -q tests", "exit_code": 1,
                            "duration": 1.2, "stdout": stream(check_out)}),
        ("check", "system", {"passed": False, "score": 0.8, "source": "junit",
                             "summary": "4 of 5 tests passed; failing: tests/test_0.py::test_edge"}),
        ("message", "agent", {"role": "assistant", "text": "done"}),
        ("lifecycle", "system", {"status": "finished", "outcome": "failed", "reason": "",
                                 "message": "finished: failed"}),
    ]  # fmt: skip
    assert len(specs) == total, len(specs)
    return specs


def seed_long_session(attempt, total: int = 10_000, *, needle_at: int | None = None) -> None:
    """The session's events on `attempt`, one bulk insert."""
    from django.utils import timezone

    from attempts.models import Event

    specs = long_session_specs(total, needle_at=needle_at)
    base = timezone.now() - timedelta(seconds=total)
    Event.objects.bulk_create(
        (
            Event(attempt=attempt, seq=i, kind=k, actor=a, data=d, time=base + timedelta(seconds=i))
            for i, (k, a, d) in enumerate(specs, start=1)
        ),
        batch_size=2000,
    )

"""Whether a failed command failed on its sandbox rather than on its own work: a tool the image
lacks, a permission the sandbox withholds, or no network. Pure logic: it reads the command's
output (stdout and stderr) and quotes the line that shows the cause.

Precision comes first: a cause is named only on the wording of the tool that hit it (bash,
dash, env, apt, pip, curl, wget, git, Python), so an ordinary test failure whose text happens to
mention "not found" or "permission" is not blamed on the environment."""

from __future__ import annotations

import re

TAIL = 16 * 1024  # characters of the output that are read, from its end
QUOTE = 200  # characters of the quoted line at most

MISSING_TOOL = "the sandbox image lacks a tool"
MISSING_MODULE = "the sandbox image lacks a Python module"
NO_PERMISSION = "the sandbox withheld a permission"
NO_NETWORK = "the sandbox has no network"

_PROGRAM = r"[^\s:'\"`]+"

# (kind, pattern) for one line. A line matches when the pattern is found in it (re.search).
_LINE_PATTERNS: list[tuple[str, re.Pattern]] = [
    (kind, re.compile(pattern))
    for kind, pattern in [
        # bash: "bash: line 1: apt-get: command not found", "bash: uv: command not found"
        (MISSING_TOOL, rf"(?:^|: ){_PROGRAM}: command not found$"),
        # zsh: "zsh: command not found: uv"
        (MISSING_TOOL, rf"^(?:\S+/)?zsh: command not found: {_PROGRAM}$"),
        # dash: "sh: 1: apt-get: not found", "/tests/test.sh: 3: uv: not found"
        (MISSING_TOOL, rf"^\S+: \d+: (?:exec: )?{_PROGRAM}: not found$"),
        # busybox ash: "sh: uv: not found", "/bin/sh: exec: uv: not found"
        (MISSING_TOOL, rf"^(?:\S*/)?(?:a|ba|da)?sh: (?:exec: )?{_PROGRAM}: not found$"),
        # a shebang's interpreter: "/usr/bin/env: 'python': No such file or directory",
        # "bash: ./run.sh: /usr/bin/python3: bad interpreter: No such file or directory"
        (MISSING_TOOL, r"^(?:\S*/)?env: ['‘\"]?[^\s'’\"]+['’\"]?: No such file or directory$"),
        (MISSING_TOOL, r": bad interpreter: No such file or directory$"),
        # "timeout: failed to run command 'uv': No such file or directory"
        (MISSING_TOOL, r"failed to run command ['‘][^'’]+['’]: No such file or directory$"),
        # Python: "ModuleNotFoundError: No module named 'numpy'" (not "...; 'x' is not a
        # package", a mistake in the code), "/usr/bin/python3: No module named pytest"
        (MISSING_MODULE, r"(?:ModuleNotFoundError|ImportError): No module named '[^']+'$"),
        (MISSING_MODULE, r"^(?:\S*/)?python[\d.]*: No module named [\w.]+$"),
        # apt: "E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission
        # denied)", "E: Unable to acquire the dpkg frontend lock (...), are you root?"
        (NO_PERMISSION, r"\(13: Permission denied\)"),
        (NO_PERMISSION, r"\bare you root\?"),
        (NO_PERMISSION, r"(?i)\b(?:must be run as root|you must be root|need to be root)\b"),
        (NO_PERMISSION, r"(?i)\bcan only be (?:used|run) by root\b"),
        (NO_PERMISSION, r"(?i)\bmust be (?:superuser|run with superuser privileges)\b"),
        # pip and Python: "[Errno 13] Permission denied: '/usr/local/lib/python3.11/...'"
        (NO_PERMISSION, r"\[Errno 1\] Operation not permitted|\[Errno 13\] Permission denied"),
        (NO_PERMISSION, r"\[Errno 30\] Read-only file system"),
        # coreutils, bash: "chown: changing ownership of 'x': Operation not permitted",
        # "mkdir: cannot create directory '/opt/x': Permission denied"
        (NO_PERMISSION, r": (?:Operation not permitted|Permission denied|Read-only file system)$"),
        # sudo: "sudo: a password is required", "alice is not in the sudoers file."
        (NO_PERMISSION, r"^sudo: a (?:terminal|password) is required\b"),
        (NO_PERMISSION, r"\bis not in the sudoers file\b|\bis not allowed to execute\b"),
        # curl: "curl: (6) Could not resolve host: example.com"; git: "fatal: unable to
        # access '...': Could not resolve host: github.com"; ssh "Could not resolve hostname"
        (NO_NETWORK, r"\bCould not resolve (?:host|hostname|proxy)\b"),
        (NO_NETWORK, r"\bTemporary failure (?:in name resolution|resolving)\b"),
        (NO_NETWORK, r"\bName or service not known\b"),
        (NO_NETWORK, r"\bNetwork is unreachable\b"),
        (NO_NETWORK, r"\bFailed to establish a new connection\b"),
        (NO_NETWORK, r"\bNameResolutionError\b|\bgaierror\b"),
        # npm and node: "getaddrinfo ENOTFOUND registry.npmjs.org", "getaddrinfo EAI_AGAIN";
        # Python on Windows: "[Errno 11001] getaddrinfo failed"
        (NO_NETWORK, r"\bgetaddrinfo (?:ENOTFOUND|EAI_AGAIN|failed)\b|\bcode EAI_AGAIN\b"),
        # wget: "wget: unable to resolve host address 'example.com'"
        (NO_NETWORK, r"\bunable to resolve host address\b"),
        # curl: "curl: (5) Could not resolve proxy: ...". Not (7) "Failed to connect" nor (28)
        # a time-out: a server of the task's own that is not up says the same.
        (NO_NETWORK, r"^curl: \((?:5|6)\) "),
        # go: "dial tcp: lookup proxy.golang.org on 127.0.0.11:53: no such host"
        (NO_NETWORK, r"\bdial tcp: lookup \S+.*: no such host\b"),
    ]
]

# pip says these when it could not reach the index, and also when a package does not exist:
# they count only after a connection error earlier in the same output.
_PIP_AFTER_CONNECTION = re.compile(
    r"Could not find a version that satisfies the requirement|No matching distribution found"
)
_PIP_CONNECTION = re.compile(
    r"Retrying \(Retry\(.*after connection broken by|NewConnectionError|ConnectTimeoutError"
    r"|Failed to establish a new connection|Temporary failure in name resolution"
    r"|Name or service not known|Network is unreachable"
)

# A connection that was refused, or to this machine, is a server that is not up, not the
# sandbox's network: "Failed to establish a new connection: [Errno 111] Connection refused".
_LOCAL = re.compile(
    r"Connection refused|\blocalhost\b|\b127\.0\.0\.1\b|\b0\.0\.0\.0\b|\[::1\]", re.IGNORECASE
)

# Lines that report on a test, not on the environment: an assertion (its message may quote any
# text at all) and a pytest verbose result line ("tests/test_io.py::test_not_found PASSED").
_NOT_EVIDENCE = re.compile(
    r"\bassert\b|AssertionError|^\S+::\S+.* (?:PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_LINES = re.compile(r"\r\n|\r|\n")


def _lines(text: str) -> list[str]:
    tail = text[-TAIL:]
    lines = _LINES.split(_ANSI.sub("", tail))
    if len(text) > TAIL and len(lines) > 1:
        lines = lines[1:]  # the first line was cut: its start is not in the tail
    return lines


def _quote(line: str, start: int) -> str:
    line = line.strip().replace("`", "'")
    if len(line) <= QUOTE:
        return line
    begin = max(0, min(start - 60, len(line) - QUOTE))
    cut = line[begin : begin + QUOTE]
    return ("…" if begin else "") + cut + ("…" if begin + QUOTE < len(line) else "")


def environment_cause(text: str) -> str:
    """What in the sandbox explains this failed command's output, in words with the line that
    shows it quoted, or "" when nothing does (see `_cause`)."""
    found = _cause(text)
    if found is None:
        return ""
    kind, quoted = found
    return f"{kind}: `{quoted}`"


def _cause(text: str) -> tuple[str, str] | None:
    """(kind, quoted line) of what explains a failed command's output. The last such line in
    the output wins, except that no network wins over a tool or module missing after it: a
    download that could not connect leaves the tool it would have installed missing."""
    if not text:
        return None
    lines = _lines(text)
    connection_seen = False
    network: tuple[str, str] | None = None
    found: tuple[str, str] | None = None
    for raw in lines:
        line = raw.strip()
        if not line or _NOT_EVIDENCE.search(line):
            continue
        local = bool(_LOCAL.search(line))
        hit = None
        for kind, pattern in _LINE_PATTERNS:
            if kind == NO_NETWORK and local:
                continue
            match = pattern.search(line)
            if match:
                hit = (kind, _quote(line, match.start()))
                break
        if hit is None and connection_seen:
            match = _PIP_AFTER_CONNECTION.search(line)
            if match:
                hit = (NO_NETWORK, _quote(line, match.start()))
        if not local and _PIP_CONNECTION.search(line):
            connection_seen = True
        if hit is not None:
            found = hit
            if hit[0] == NO_NETWORK:
                network = hit
    if found is not None and network is not None and found[0] in (MISSING_TOOL, MISSING_MODULE):
        return network
    return found


STAGES = {
    "environment": "setting up the environment",
    "setup": "setting up the environment",
    "solution": "the reference solution",
    "oracle": "the reference solution",
    "agent": "the agent's command",
    "work": "the agent's command",
    "verifier": "the check",
    "check": "the check",
}


# Who a stage belongs to, for a failure on missing network: the task's own stages fail for
# the task (its sandbox has the network the task gives it), the agent's for the agent.
_PARTY = {
    "environment": "setup",
    "setup": "setup",
    "solution": "solution",
    "oracle": "solution",
    "the reference solution": "solution",
    "agent": "agent",
    "work": "agent",
    "the agent": "agent",
    "verifier": "check",
    "check": "check",
    "the check": "check",
    "the check of a valid task": "check of a valid task",
}
_NEEDS_NETWORK = {
    "setup": "the task's setup needs network, which its sandbox does not have: the task's "
    "failure, not the agent's",
    "solution": "the reference solution needs network, which the task's sandbox does not "
    "have: the task's failure, not an agent's",
    "agent": "the agent's command needs network, which this task's sandbox does not have",
    # A check's output holds what the agent's code printed too: whose need it is shows only
    # where the task is known to pass its own check without network (its validation).
    "check": "the check needs network, which its sandbox does not have (the task's verifier, "
    "or the agent's code it ran)",
    "check of a valid task": "the agent's code needs network, which this task's sandbox does "
    "not have (the task's reference passes this check without it)",
}


def explain(stage: str, text: str) -> str:
    """'<stage> failed on the environment: <cause>', or for missing network '<whose stage>
    needs network ...: <line>', naming whose failure it is; "" when the output shows no
    environment cause. `stage` is a stage key (environment, solution, agent, verifier, check)
    or words."""
    found = _cause(text)
    if found is None:
        return ""
    kind, quoted = found
    party = _PARTY.get(stage)
    if kind == NO_NETWORK and party:
        return f"{_NEEDS_NETWORK[party]}: `{quoted}`"
    return f"{STAGES.get(stage, stage)} failed on the environment: {kind}: `{quoted}`"

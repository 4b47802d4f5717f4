"""Who an API command runs as, other than the sandbox user: a user of the sandbox's image,
never root. Pure logic over the image's /etc/passwd and /etc/group (read by the worker from the
container, where only root may change them)."""

from __future__ import annotations


class UserRefused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _entries(text: bytes, fields: int) -> list[list[str]]:
    rows = []
    for line in text.decode("utf-8", errors="replace").splitlines():
        parts = line.split(":")
        if len(parts) >= fields and not line.startswith("#"):
            rows.append(parts)
    return rows


def resolve_user(user: str, *, passwd: bytes, group: bytes, allow_root: bool = False) -> str:
    """`uid:gid` for a user name or uid of the image. Refused: no such user (`user_not_found`),
    or (unless the task allows root) a user that is root, in root's group, or has root's
    group among its groups (`user_not_allowed`)."""
    if allow_root and user in ("root", "0", "0:0"):
        return "0:0"
    users = _entries(passwd, 4)
    found = next((u for u in users if u[0] == user), None)
    if found is None and user.isdigit():
        found = next((u for u in users if u[2] == user), None)
    if found is None:
        raise UserRefused(
            "user_not_found",
            f"unable to find user {user}: no matching entries in the sandbox's /etc/passwd",
        )
    name, uid, gid = found[0], found[2], found[3]
    members = {g[2] for g in _entries(group, 4) if name in (m.strip() for m in g[3].split(","))}
    if not allow_root and (uid == "0" or gid == "0" or "0" in members):
        raise UserRefused(
            "user_not_allowed",
            f"user {user} is root or in root's group; commands never run as root in a Boltz "
            "sandbox",
        )
    if not (uid.isdigit() and gid.isdigit()):
        raise UserRefused("user_not_found", f"user {user} has no numeric uid and gid")
    return f"{uid}:{gid}"

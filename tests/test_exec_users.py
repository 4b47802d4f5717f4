"""Who an API command may run as (pure logic over the image's passwd and group files), and how
an exec's standard input is taken: the rules the Inspect provider's `user` and `input` rely on."""

from __future__ import annotations

import base64

import pytest

from attempts.api.errors import status_of
from attempts.dispatch.errors import InvalidRequest
from attempts.run.users import UserRefused, resolve_user
from attempts.services.sandboxes import exec_stdin, exec_user

PASSWD = b"""root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
toor:x:0:100::/root:/bin/sh
sandbox:x:1000:1000::/home/sandbox:/bin/bash
wheelie:x:1001:1001::/home/wheelie:/bin/sh
rootgroup:x:1002:0::/home/rg:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
"""
GROUP = b"""root:x:0:wheelie
daemon:x:1:
sandbox:x:1000:
nogroup:x:65534:
"""


def test_a_user_of_the_image_runs_as_its_uid_and_gid_by_name_or_uid():
    assert resolve_user("nobody", passwd=PASSWD, group=GROUP) == "65534:65534"
    assert resolve_user("65534", passwd=PASSWD, group=GROUP) == "65534:65534"
    assert resolve_user("daemon", passwd=PASSWD, group=GROUP) == "1:1"


@pytest.mark.parametrize("user", ["root", "0", "toor", "rootgroup", "wheelie"])
def test_root_and_anyone_with_roots_group_are_refused(user):
    with pytest.raises(UserRefused) as refused:
        resolve_user(user, passwd=PASSWD, group=GROUP)
    assert refused.value.code == "user_not_allowed" and "root" in refused.value.message


def test_an_unknown_user_is_named_in_the_refusal():
    with pytest.raises(UserRefused) as refused:
        resolve_user("nonexistent", passwd=PASSWD, group=GROUP)
    assert refused.value.code == "user_not_found" and "nonexistent" in refused.value.message


def test_the_web_refuses_root_and_malformed_users_before_any_worker_is_asked():
    assert exec_user(None) == exec_user("") == ""
    assert exec_user("sandbox") == exec_user("1000") == "1000"  # that user, not the task's
    assert exec_user("nobody") == "nobody"
    for bad, code in (("root", "user_not_allowed"), ("0", "user_not_allowed"), ("a:b", "invalid")):
        with pytest.raises(InvalidRequest) as refused:
            exec_user(bad)
        assert refused.value.code == code


def test_stdin_is_text_or_base64_bytes_never_both():
    assert exec_stdin("hé", None) == base64.b64encode("hé".encode()).decode()
    raw = base64.b64encode(b"\x00\xff").decode()
    assert exec_stdin(None, raw) == raw
    assert exec_stdin("", None) is None and exec_stdin(None, "") is None
    for text, encoded in (("a", raw), (None, "not base64!")):
        with pytest.raises(InvalidRequest) as refused:
            exec_stdin(text, encoded)
        assert status_of(refused.value) == 400

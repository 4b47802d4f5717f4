"""Nothing secret shown: a saved agent's environment values and a task's secret settings are
[redacted] in command output, and the saved agent's admin never renders a stored value."""

from __future__ import annotations

import random
import re
import time

import pytest
from django.core.files.storage import default_storage

from attempts.core.redaction import REDACTED, Redactor, secrets_of
from attempts.models import Agent, Attempt, Event, EventKind
from attempts.services.attempts import attempt_create
from tests.conftest import new_task, wait_finished


def streamed(redactor: Redactor, chunks) -> bytes:
    return b"".join(redactor.feed(c) for c in chunks) + redactor.flush()


def whole(secrets, data: bytes) -> bytes:
    return streamed(Redactor(secrets), [data])


# --- the redactor ---------------------------------------------------------------------------------
def test_a_secret_is_replaced_wherever_it_is():
    r = Redactor(["tok-0123456789abcdef"])
    out = streamed(r, [b"KEY=tok-0123456789abcdef\nagain tok-0123456789abcdef", b" end\n"])
    assert out == b"KEY=[redacted]\nagain [redacted] end\n"
    assert r.text("a tok-0123456789abcdef b") == f"a {REDACTED} b"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_a_secret_split_across_chunks_at_every_offset_is_caught(chunk):
    secret = b"tok-0123456789abcdef"
    data = b"before " + secret + b" middle " + secret + secret + b" after tok-0123"
    expected = b"before [redacted] middle [redacted][redacted] after tok-0123"
    for cut in range(len(data) + 1):  # two chunks, cut at every offset
        assert streamed(Redactor([secret.decode()]), [data[:cut], data[cut:]]) == expected
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    assert streamed(Redactor([secret.decode()]), pieces) == expected


def test_what_is_held_back_is_at_most_the_longest_secret_less_one_byte_and_only_a_possible_start():
    r = Redactor(["0123456789abcdef", "zyxwvutsrq"])
    assert r.feed(b"plain output with nothing to hold back\n") == (
        b"plain output with nothing to hold back\n"
    )
    assert r.feed(b"value: 0123456789abc") == b"value: "  # could still be the secret
    assert r.feed(b"X and more") == b"0123456789abcX and more"  # it was not
    assert r.feed(b"a" * 100 + b"0123456789abcde") == b"a" * 100
    assert len(r._carry) <= 15
    assert r.flush() == b"0123456789abcde"
    assert r.flush() == b""


def test_overlapping_secrets_redact_the_longest_and_give_what_redacting_the_whole_does():
    secrets = ["abcdefgh", "abcdefghijkl", "ghijklmnop", "xxxxxxxx"]
    data = b"1 abcdefghijkl 2 abcdefghij 3 abcdefghijklmnop 4 xxxxxxxxxxx 5 fghijklmnop"
    expected = b"1 [redacted] 2 [redacted]ij 3 [redacted]mnop 4 [redacted]xxx 5 f[redacted]"
    assert whole(secrets, data) == expected
    for cut in range(len(data) + 1):
        for second in (cut, min(len(data), cut + 5)):
            chunks = [data[:cut], data[cut:second], data[second:]]
            assert streamed(Redactor(secrets), chunks) == expected, (cut, second)
    # a partly printed long secret that a shorter one starts: the shorter one is redacted,
    # and nothing of the long one is let out before it is known not to follow
    r = Redactor(["abcdefgh", "abcdefghijkl"])
    assert r.feed(b"> abcdefghij") == b"> "
    assert r.feed(b"kl <") == b"[redacted] <"
    assert r.text("abcdefghijkl abcdefgh") == "[redacted] [redacted]"


def test_random_streams_in_random_chunks_match_redacting_the_whole():
    rng = random.Random(7)
    secrets = ["aabaabab", "abababababab", "baabaabaab", "bbbbbbbbbbbbbbbbbbbb"]
    pattern = re.compile(b"|".join(re.escape(s.encode()) for s in sorted(secrets, key=len)[::-1]))
    for _ in range(300):
        data = bytes(rng.choice(b"ab") for _ in range(rng.randrange(0, 200)))
        chunks, at = [], 0
        while at < len(data):
            size = rng.randrange(1, 30)
            chunks.append(data[at : at + size])
            at += size
        assert streamed(Redactor(secrets), chunks) == pattern.sub(b"[redacted]", data)


def test_values_shorter_than_eight_characters_are_not_redacted():
    r = Redactor(["+", "true", "gpt-4o", "1234567", "12345678", "", None])
    assert r.secrets == ["12345678"]
    assert streamed(r, [b"1 + 1 is true for gpt-4o: 1234567 and 12345678\n"]) == (
        b"1 + 1 is true for gpt-4o: 1234567 and [redacted]\n"
    )
    nothing = Redactor(["short"])
    assert not nothing and nothing.feed(b"short") == b"short" and nothing.flush() == b""
    assert nothing.text("short") == "short"


def test_bytes_that_are_not_utf8_pass_through_and_utf8_secrets_still_match():
    secret = "pässwörd-ключ-🔑"
    r = Redactor([secret])
    data = b"\xff\xfe\x80 " + secret.encode() + b" \xc3(\xa0\xa1 " + secret.encode()[:5]
    for cut in range(len(data) + 1):
        out = streamed(Redactor([secret]), [data[:cut], data[cut:]])
        assert out == b"\xff\xfe\x80 [redacted] \xc3(\xa0\xa1 " + secret.encode()[:5]
    assert r.text(f"x{secret}y") == "x[redacted]y"
    assert whole(["\udcff-surrogate"], b"\xff-surrogate") == b"[redacted]"


def test_fifty_megabytes_stream_through_in_reasonable_time():
    secrets = ["tok-0123456789abcdef", "sk-proj-" + "AbCdEfGh" * 6, "hunter2hunter2"]
    rng = random.Random(1)
    block = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789 -=_\n") for _ in range(1 << 16))
    block = block[:30000] + b"tok-0123456789abcdef" + block[30000:]
    data = block * 800  # 52 MB, a secret in every 64 KiB (and so across chunk boundaries)
    r = Redactor(secrets)
    began = time.perf_counter()
    out = [r.feed(data[at : at + 65536]) for at in range(0, len(data), 65536 - 7)]
    out.append(r.flush())
    took = time.perf_counter() - began
    result = b"".join(out)
    assert b"tok-0123456789abcdef" not in result
    assert result.count(b"[redacted]") == 800
    assert took < 10, f"{len(data) >> 20} MiB took {took:.1f}s"


# --- what an attempt's secrets are ------------------------------------------------------------------
def test_an_attempts_secrets_are_its_agent_env_and_its_tasks_references(db, monkeypatch):
    monkeypatch.setenv("WORKER_API_KEY", "worker-key-0123456789")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    task = new_task(
        stage_env={
            "environment": {"PLAIN": "a plain long value", "KEY": "${WORKER_API_KEY}"},
            "verifier": {
                "BEARER": "Bearer ${WORKER_API_KEY}",
                "MISSING": "${NOT_SET_ANYWHERE}",
                "DEFAULTED": "${NOT_SET_ANYWHERE:-a-long-default}",
            },
        }
    )
    attempt = Attempt.objects.create(
        task=task,
        number=1,
        agent="saved",
        agent_env={"OPENAI_API_KEY": "sk-0123456789abcdef", "MODE": "fast"},
    )
    assert sorted(secrets_of(attempt)) == sorted(
        [
            "sk-0123456789abcdef",
            "worker-key-0123456789",
            "Bearer worker-key-0123456789",
            "a-long-default",
        ]
    )
    bare = Attempt(pk=attempt.pk, container_id="x")  # a pool's step knows only its id
    assert secrets_of(bare) == []


# --- the saved agent's admin --------------------------------------------------------------------------
def test_the_agent_admin_never_renders_a_stored_value_and_a_blank_value_keeps_it(admin_client):
    agent = Agent.objects.create(
        name="secretive",
        command="true",
        environment={"OPENAI_API_KEY": "sk-stored-0123456789", "MODE": "fast-and-loud"},
    )
    url = f"/admin/attempts/agent/{agent.pk}/change/"
    html = admin_client.get(url).content.decode()
    assert "sk-stored-0123456789" not in html and "fast-and-loud" not in html
    assert "MODE=\nOPENAI_API_KEY=" in html  # the names, with blank values

    form = {"name": "secretive", "description": "", "command": "true"}
    # blank keeps, a new value replaces, a new name is added, a name left out is removed
    response = admin_client.post(
        url, {**form, "environment": "OPENAI_API_KEY=\r\nNEW_ONE=brand-new-value\r\n"}
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    agent.refresh_from_db()
    assert agent.environment == {
        "OPENAI_API_KEY": "sk-stored-0123456789",
        "NEW_ONE": "brand-new-value",
    }
    html = admin_client.get(url).content.decode()
    assert "sk-stored-0123456789" not in html and "brand-new-value" not in html
    replaced = admin_client.post(url, {**form, "environment": "OPENAI_API_KEY=sk-new-9876543210"})
    assert replaced.status_code == 302
    agent.refresh_from_db()
    assert agent.environment == {"OPENAI_API_KEY": "sk-new-9876543210"}
    # the JSON form still works, with the same rule
    admin_client.post(url, {**form, "environment": '{"OPENAI_API_KEY": "", "N": 3}'})
    agent.refresh_from_db()
    assert agent.environment == {"OPENAI_API_KEY": "sk-new-9876543210", "N": "3"}
    # a new name needs a value; a bad name is refused
    for bad, why in (("FRESH=", "give FRESH a value"), ("1X=y", "is not a variable name")):
        html = admin_client.post(url, {**form, "environment": bad}).content.decode()
        assert why in html and "sk-new-9876543210" not in html
    agent.refresh_from_db()
    assert agent.environment == {"OPENAI_API_KEY": "sk-new-9876543210", "N": "3"}

    added = admin_client.post(
        "/admin/attempts/agent/add/",
        {"name": "another", "description": "", "command": "true", "environment": "K=v-long-one"},
    )
    assert added.status_code == 302
    assert Agent.objects.get(name="another").environment == {"K": "v-long-one"}


# --- end to end: a real worker runs an agent that prints its secrets -------------------------------------
SECRET = "tok-0123456789abcdef"


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
def test_a_saved_agent_printing_its_secrets_shows_them_nowhere(worker, load_example, admin_client):
    from django.conf import settings

    agent = Agent.objects.create(
        name="leaky",
        command="env; echo $SECRET_TOKEN >&2; printf 'tok-0123456789'; printf 'abcdef\\n'",
        environment={"SECRET_TOKEN": SECRET, "SHORT": "abc"},
    )
    # a task setting that refers to the worker's environment (its queue's name, in tests)
    task = load_example(
        "fix-add", stage_env={"environment": {"TASK_KEY": "stage-${BOLTZ_QUEUE}-key"}}
    )
    task_secret = f"stage-{settings.BOLTZ_QUEUE}-key"
    attempt = wait_finished([attempt_create(task=task, agent="leaky")])[0]
    assert attempt.agent_env == {"SECRET_TOKEN": SECRET, "SHORT": "abc"}

    events = list(Event.objects.filter(attempt=attempt))
    dumped = "\n".join(str(e.data) for e in events)
    for value in (SECRET, task_secret):
        assert value not in dumped
    end = next(
        e.data
        for e in events
        if e.kind == EventKind.EXEC
        and e.data.get("phase") == "end"
        and e.data.get("step") == "agent"
    )
    assert end["stdout"]["head"].count(REDACTED) >= 3  # env's two lines and the split printf
    assert "SECRET_TOKEN=[redacted]" in end["stdout"]["head"]
    assert "TASK_KEY=[redacted]" in end["stdout"]["head"]
    assert "SHORT=abc" in end["stdout"]["head"]  # too short to be redacted
    assert end["stderr"]["head"] == "[redacted]\n"
    for stream in ("stdout", "stderr"):
        with default_storage.open(end[stream]["raw"]) as handle:
            raw = handle.read()
        assert SECRET.encode() not in raw and task_secret.encode() not in raw
        assert REDACTED.encode() in raw
    for e in events:  # every stored output of every command
        for stream in ("stdout", "stderr"):
            name = (e.data.get(stream) or {}).get("raw") if e.kind == EventKind.EXEC else ""
            if name:
                with default_storage.open(name) as handle:
                    assert SECRET.encode() not in handle.read()

    page = admin_client.get(attempt.get_absolute_url())
    assert page.status_code == 200
    html = page.content.decode()
    assert SECRET not in html and task_secret not in html and REDACTED in html
    html = admin_client.get(f"/admin/attempts/agent/{agent.pk}/change/").content.decode()
    assert SECRET not in html and "SECRET_TOKEN=" in html

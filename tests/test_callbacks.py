"""Callback URLs reach only public internet addresses, or those the operator allows
(BOLTZ_CALLBACK_ALLOW): hostile URLs are refused when given (API and SDK, a 400 saying why),
the URL is checked again before each delivery and the POST goes to the address that check
found, redirects are not followed, and the timeline never tells an open port from a closed
one. The test run allows 127.0.0.1 (boltz_web/testing.py); the refusals at the API are tested
on a web process started with the default, an empty allow-list.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import ssl
import subprocess
import threading
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
from django.contrib.auth import get_user_model
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from attempts.api.tokens import callback_key, token_create
from attempts.dispatch import queue as queueing
from attempts.dispatch.errors import InvalidRequest
from attempts.models import Attempt, Outcome, Status
from attempts.services import callbacks
from attempts.services.callback_targets import callback_target, why_not_public
from boltz_web.env_values import parse_hosts_and_networks
from tests.conftest import new_task, run_web, wait_until

PUBLIC = "93.184.216.34"
BAD_CHARACTERS = "no spaces, control characters"
NUMBERS = "four decimal numbers"
NOT_PUBLIC_NAME = "must resolve to public internet addresses only"

# Each hostile URL and what its refusal says.
HOSTILE = {
    "http://127.0.0.1/": "loopback",
    "http://127.0.0.1:6379/": "loopback",
    "http://127.254.0.9:22/": "loopback",
    "http://localhost:8000/": NOT_PUBLIC_NAME,
    "http://169.254.169.254/latest/meta-data/": "link-local",
    "http://10.0.0.1/": "private",
    "http://172.16.0.1/": "private",
    "http://192.168.1.1/admin": "private",
    "http://100.64.0.1/": "carrier-grade NAT",
    "http://0.0.0.0:8000/": "unspecified",
    "http://224.0.0.1/": "multicast",
    "http://240.0.0.1/": "reserved",
    "http://255.255.255.255/": "reserved",
    "http://198.18.0.1/": "private",
    "http://[::1]/": "loopback",
    "http://[::1]:8000/": "loopback",
    "http://[::]/": "unspecified",
    "http://[::ffff:127.0.0.1]/": "IPv4-mapped",
    "http://[::ffff:a9fe:a9fe]/": "IPv4-mapped",
    "http://[::127.0.0.1]/": "reserved",
    "http://[2002:7f00:1::]/": "6to4 of 127.0.0.1",
    "http://[2002:a9fe:a9fe::1]/": "6to4 of 169.254.169.254",
    "http://[64:ff9b::a00:1]/": "NAT64 of 10.0.0.1",
    "http://[fc00::1]/": "unique local",
    "http://[fd12:3456:789a::1]/": "unique local",
    "http://[fe80::1]/": "link-local",
    "http://[fe80::1%25eth0]/": "no zone",
    "http://[ff02::1]/": "multicast",
    "http://[2001:db8::1]/": "private",
    "http://0x7f000001/": NUMBERS,
    "http://2130706433/": NUMBERS,
    "http://0177.0.0.1/": NUMBERS,
    "http://127.1/": NUMBERS,
    "http://0x7f.0.0.1/": NUMBERS,
    "http://0/": NUMBERS,
    "http://127.0.0.1./": NUMBERS,
    "http://127.0.0.%31/": "not a host name",
    "http://nonexistent.invalid/": NOT_PUBLIC_NAME,
    f"http://user:secret@{PUBLIC}/": "no user name or password",
    f"http://{PUBLIC}@127.0.0.1/": "no user name or password",
    f"http://{PUBLIC}/hook\r\nX-Injected: 1": BAD_CHARACTERS,
    f"http://{PUBLIC}/hook\n": BAD_CHARACTERS,
    f"http://{PUBLIC}/a hook": BAD_CHARACTERS,
    f"\thttp://{PUBLIC}/": BAD_CHARACTERS,
    f"http://{PUBLIC}\\@127.0.0.1/": BAD_CHARACTERS,
    "http://bücher.example/": BAD_CHARACTERS,
    f"ftp://{PUBLIC}/": "give an http:// or https:// URL",
    "file:///etc/passwd": "give an http:// or https:// URL",
    "gopher://127.0.0.1:6379/_FLUSHALL": "give an http:// or https:// URL",
    "javascript:alert(1)": "give an http:// or https:// URL",
    "http:///hook": "no host",
    f"http://{PUBLIC}:99999/": "port",
    f"http://{PUBLIC}:/": "host:port",
    "http://" + "a" * 1000 + ".example/": "at most 1000 characters",
}
ACCEPTED = [
    f"http://{PUBLIC}/hook",
    f"HTTP://{PUBLIC}:8080/hook?run=1#part",
    "https://hooks.example.com/boltz",
    "http://[2606:4700:4700::1111]/",
    "http://[2002:808:808::1]/",  # 6to4 of 8.8.8.8
    "http://[64:ff9b::808:808]/",  # NAT64 of 8.8.8.8
]


def fake_dns(table: dict[str, list[str]]):
    """A resolver answering from `table` (nothing for any other name), counting its calls."""

    def resolve(host: str, port: int) -> list[str]:
        resolve.calls.append(host)
        return table.get(host, [])

    resolve.calls = []
    return resolve


PUBLIC_DNS = fake_dns({"hooks.example.com": [PUBLIC], "localhost": ["127.0.0.1"]})


# --- the check, as a unit ------------------------------------------------------------------------
def test_the_table_holds_at_least_twenty_hostile_urls():
    assert len(HOSTILE) >= 20


@pytest.mark.parametrize("url", list(HOSTILE))
def test_a_hostile_url_is_refused_with_the_reason(url):
    with pytest.raises(InvalidRequest) as refused:
        callback_target(url, resolve=PUBLIC_DNS, allow=())
    assert refused.value.field == "callback_url"
    assert HOSTILE[url] in refused.value.message


@pytest.mark.parametrize("url", ACCEPTED)
def test_a_public_url_is_taken(url):
    target = callback_target(url, resolve=PUBLIC_DNS, allow=())
    assert not why_not_public(ipaddress.ip_address(target.address))


def test_the_delivery_goes_to_the_address_checked_naming_the_host():
    target = callback_target(
        "https://hooks.example.com:8443/boltz?run=1#x", resolve=PUBLIC_DNS, allow=()
    )
    assert target.pinned_url == f"https://{PUBLIC}:8443/boltz?run=1"
    assert target.netloc == "hooks.example.com:8443"  # the Host header
    assert target.extensions == {"sni_hostname": "hooks.example.com"}  # TLS checks the name
    v6 = callback_target("http://[2606:4700:4700::1111]/x", resolve=PUBLIC_DNS, allow=())
    assert v6.pinned_url == "http://[2606:4700:4700::1111]:80/x" and v6.extensions == {}


def test_a_name_is_refused_if_any_of_its_addresses_is_not_public():
    mixed = fake_dns({"mixed.example": [PUBLIC, "10.1.2.3"], "v6.example": ["fd00::1"]})
    for url in ("http://mixed.example/", "http://v6.example/"):
        with pytest.raises(InvalidRequest, match=NOT_PUBLIC_NAME):
            callback_target(url, resolve=mixed, allow=())


def test_a_name_that_resolved_to_a_public_address_is_refused_once_it_resolves_privately():
    """DNS rebinding: the check that passed when the URL was given fails at delivery."""
    answers = iter([[PUBLIC], ["169.254.169.254"]])

    def rebinding(host, port):
        return next(answers)

    url = "http://rebind.example/hook"
    assert callback_target(url, resolve=rebinding, allow=()).address == PUBLIC
    with pytest.raises(InvalidRequest, match=NOT_PUBLIC_NAME):
        callback_target(url, resolve=rebinding, allow=())


def test_the_allow_list_lets_exactly_its_hosts_and_networks_through():
    allow = parse_hosts_and_networks("hooks.internal, 10.1.0.0/16, 127.0.0.1, [::1]")
    dns = fake_dns({"hooks.internal": ["10.9.9.9"], "lan.example": ["10.1.2.3"]})
    for url in (
        "http://hooks.internal:9000/",  # a name allowed: whatever it resolves to
        "http://lan.example/",  # resolves into an allowed network
        "http://10.1.255.1/",
        "http://127.0.0.1:8080/",
        "http://[::1]:8080/",
    ):
        assert callback_target(url, resolve=dns, allow=allow)
    for url in ("http://127.0.0.2/", "http://10.2.0.1/", "http://0x7f000001/", "http://[::2]/"):
        with pytest.raises(InvalidRequest):
            callback_target(url, resolve=dns, allow=allow)


URL_PARTS = st.sampled_from(
    [
        "http://",
        "https://",
        "HTTP://",
        "ftp://",
        "//",
        "[",
        "]",
        ":",
        "@",
        "%",
        ".",
        "/",
        "0x",
        "127",
        "0",
        "::1",
        "::ffff:",
        "localhost",
        "hooks.example.com",
        PUBLIC,
        "\r\n",
        " ",
        "\\",
        "#",
        "?",
        "ü",
        "-",
        "_",
        "65536",
        "80",
    ]
)


@hypothesis_settings(max_examples=500, deadline=None)
@given(st.lists(URL_PARTS, max_size=10).map("".join) | st.text(max_size=60))
def test_any_string_is_a_target_or_a_refusal_that_says_why(url):
    try:
        target = callback_target(url, resolve=PUBLIC_DNS, allow=())
    except InvalidRequest as refused:
        assert refused.field == "callback_url" and refused.message
    else:
        assert not why_not_public(ipaddress.ip_address(target.address))
        assert target.pinned_url.startswith(("http://", "https://"))


@pytest.mark.parametrize("entry", ["http://x", "a b", "0x7f000001", "127.1", "10.0.0.0/40", "-x-"])
def test_a_bad_allow_list_entry_is_refused_at_start_up(entry):
    with pytest.raises(ValueError, match="neither a host name nor an IP address"):
        parse_hosts_and_networks(entry)


# --- deliveries, as a unit over real sockets -----------------------------------------------------
@contextmanager
def listener(address: str = "127.0.0.1", status: int = 200, headers: dict | None = None):
    """An HTTP server answering every POST with `status` (and `headers`); yields (its port,
    the requests it got as (headers, body))."""
    got = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the standard library's name
            got.append((dict(self.headers), self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer((address, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port, got
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def raw_listener(behaviour: str):
    """A TCP port that is not HTTP: `close` hangs up at once, `banner` says something else,
    `silent` never says anything. Yields its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()
    held = []

    def serve():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            if behaviour == "banner":
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
            if behaviour == "silent":
                held.append(conn)
            else:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        sock.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ended_attempt(url: str, *, number: int = 1, task=None) -> Attempt:
    task = task or new_task(f"cb-{number}")
    return Attempt.objects.create(
        task=task,
        number=number,
        agent="noop",
        status=Status.FINISHED,
        outcome=Outcome.PASSED,
        score=1.0,
        callback_url=url,
        callback_key=callback_key("bz_token"),
    )


def deliveries(attempt: Attempt) -> list[dict]:
    return [e.data for e in attempt.events.filter(data__action="callback").order_by("seq")]


@pytest.mark.django_db
def test_a_name_resolving_privately_at_delivery_is_not_sent_to(settings):
    settings.BOLTZ_CALLBACK_ALLOW = ()
    with listener() as (port, got):
        attempt = ended_attempt(f"http://rebind.example:{port}/hook")
        dns = fake_dns({"rebind.example": ["127.0.0.1"]})
        assert callbacks.deliver(attempt.pk, 1, resolve=dns) is False
        assert callbacks.deliver(attempt.pk, 5, resolve=dns) is True  # the last: given up
    assert got == []
    sent = deliveries(attempt)
    assert [d["delivered"] for d in sent] == [False, False]
    assert "not sent: host 'rebind.example' must resolve to public" in sent[0]["message"]
    assert sent[1]["message"].endswith("; giving up")


@pytest.mark.django_db
def test_a_delivery_connects_to_the_address_checked_and_never_resolves_again(settings):
    """`pinned.example` resolves nowhere but in the fake resolver: the POST reaches the
    listener only because it goes to the address the check found."""
    settings.BOLTZ_CALLBACK_ALLOW = parse_hosts_and_networks("127.0.0.1")
    with listener() as (port, got):
        attempt = ended_attempt(f"http://pinned.example:{port}/hook?run=1")
        dns = fake_dns({"pinned.example": ["127.0.0.1"]})
        assert callbacks.deliver(attempt.pk, 1, resolve=dns) is True
    assert dns.calls == ["pinned.example"]  # once, by the check
    [(headers, body)] = got
    assert headers["Host"] == f"pinned.example:{port}"
    key = callback_key("bz_token")
    expected = "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Boltz-Signature"] == expected
    assert json.loads(body)["outcome"] == "passed"
    assert deliveries(attempt)[0]["message"].endswith(": answered 200")


@pytest.mark.django_db
def test_a_redirect_is_not_followed(settings):
    """The allowed receiver answers 302 and 307 to an internal address that is listening:
    nothing reaches it, and the try counts as failed."""
    settings.BOLTZ_CALLBACK_ALLOW = parse_hosts_and_networks("127.0.0.1")
    with listener("127.0.0.2") as (inner_port, inner_got):
        inner = f"http://127.0.0.2:{inner_port}/internal"
        task = new_task("redirects")
        for number, status in enumerate((302, 307, 308), start=1):
            with listener(status=status, headers={"Location": inner}) as (port, got):
                attempt = ended_attempt(f"http://127.0.0.1:{port}/", number=number, task=task)
                assert callbacks.deliver(attempt.pk, 1) is False
            assert len(got) == 1
            [sent] = deliveries(attempt)
            assert sent["message"].endswith(f"answered {status}; redirects are not followed")
    assert inner_got == []


@pytest.mark.django_db
def test_failures_short_of_an_http_answer_are_recorded_alike(settings, monkeypatch):
    """A closed port, a port that hangs up, one that speaks another protocol and one that
    never answers read the same on the timeline: it is no port scanner."""
    settings.BOLTZ_CALLBACK_ALLOW = parse_hosts_and_networks("127.0.0.1")
    monkeypatch.setattr(callbacks, "TIMEOUT", 1.0)
    task = new_task("ports")
    messages = []
    ports = {"closed": closed_port()}
    with (
        raw_listener("close") as hangs_up,
        raw_listener("banner") as other,
        raw_listener("silent") as silent,
    ):
        ports.update(hangs_up=hangs_up, other=other, silent=silent)
        for number, port in enumerate(ports.values(), start=1):
            url = f"http://127.0.0.1:{port}/"
            attempt = ended_attempt(url, number=number, task=task)
            assert callbacks.deliver(attempt.pk, 1) is False
            [sent] = deliveries(attempt)
            messages.append(sent["message"].replace(url, "<url>"))
    assert len(set(messages)) == 1, messages
    assert messages[0].endswith(callbacks.NO_ANSWER)


@pytest.mark.django_db
def test_over_https_the_name_is_what_tls_checks(settings, tmp_path):
    """The POST goes to the checked address, but the TLS handshake names the host (SNI), and
    a certificate the system does not trust is no delivery."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=tls.example", "-keyout", "key.pem", "-out", "cert.pem"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=60,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    names = []
    context.sni_callback = lambda sslsock, name, ctx: names.append(name)
    settings.BOLTZ_CALLBACK_ALLOW = parse_hosts_and_networks("127.0.0.1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)

        def handshake():
            conn, _ = sock.accept()
            with conn, suppress(OSError):
                context.wrap_socket(conn, server_side=True).close()

        thread = threading.Thread(target=handshake, daemon=True)
        thread.start()
        port = sock.getsockname()[1]
        attempt = ended_attempt(f"https://tls.example:{port}/hook")
        dns = fake_dns({"tls.example": ["127.0.0.1"]})
        assert callbacks.deliver(attempt.pk, 1, resolve=dns) is False
        thread.join(10)
    assert names == ["tls.example"]
    assert deliveries(attempt)[0]["message"].endswith(callbacks.NO_ANSWER)


# --- the API and the SDK refuse them when given -----------------------------------------------
@pytest.fixture(scope="module")
def default_web(django_db_setup, django_db_blocker, redis_ready):
    """A web process with the default settings: no receiver allowed but public ones."""
    with run_web(env={"BOLTZ_CALLBACK_ALLOW": ""}) as url:
        yield url


@pytest.mark.django_db(transaction=True)
def test_the_api_and_the_sdk_refuse_every_hostile_url_and_start_nothing(default_web, figure):
    from boltz import Client
    from boltz.errors import InvalidRequest as SdkInvalidRequest

    new_task("hooked")
    user = get_user_model().objects.create_user("hooker")
    token = token_create(user=user)[1]
    refused = {"api": 0, "sdk": 0}
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=default_web, headers=auth, timeout=30) as api:
        for url, why in HOSTILE.items():
            answer = api.post(
                "/api/tasks/hooked/attempts", json={"agent": "noop", "callback_url": url}
            )
            assert answer.status_code == 400, (url, answer.text)
            assert answer.headers["Content-Type"].startswith("application/json")
            body = answer.json()
            assert body["code"] == "invalid" and body["detail"].startswith("callback_url: ")
            assert why in body["detail"], (url, body)
            refused["api"] += 1
    with Client(default_web, token=token, timeout=30) as sdk:
        for url, why in HOSTILE.items():
            with pytest.raises(SdkInvalidRequest, match="callback_url") as error:
                sdk.run("hooked", "noop", callback_url=url)
            assert why in str(error.value), url
            refused["sdk"] += 1
    assert refused == {"api": len(HOSTILE), "sdk": len(HOSTILE)}
    assert not Attempt.objects.filter(task__slug="hooked").exists()  # nothing was started
    print(f"\n{len(HOSTILE)} hostile callback URLs refused by the API and by the SDK, 0 started")
    figure(
        f"{len(HOSTILE)} hostile callback URLs: {refused['api']} refused by the API, "
        f"{refused['sdk']} by the SDK, "
        f"{Attempt.objects.filter(task__slug='hooked').count()} attempts started"
    )


# --- the real worker checks again before it delivers ------------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
def test_the_worker_delivers_to_an_allowed_receiver_and_refuses_the_others_alike(worker, figure):
    """Stored callback URLs (as a row written before this check, or a name that resolved
    elsewhere when given) reach the real worker: the allowed 127.0.0.1 receiver gets its
    signed callback; internal ones get nothing, and their timelines read the same whether
    the port is open or closed."""
    task = new_task("worker-hooks")
    with listener() as (allowed_port, allowed_got), listener("127.0.0.2") as (open_port, got):
        urls = {
            "allowed": f"http://127.0.0.1:{allowed_port}/hook",
            "open": f"http://127.0.0.2:{open_port}/hook",
            "closed": f"http://127.0.0.2:{closed_port()}/hook",
            "metadata": "http://169.254.169.254/latest/meta-data/",
            "private": "http://10.0.0.1:6379/",
            "v6": "http://[::1]:6379/",
        }
        made = {
            name: ended_attempt(url, number=number, task=task)
            for number, (name, url) in enumerate(urls.items(), start=1)
        }
        for attempt in made.values():
            queueing.enqueue_callback(attempt.pk)

        def settled() -> bool:
            return all(
                len(deliveries(a)) == (1 if name == "allowed" else callbacks.TRIES)
                for name, a in made.items()
            )

        wait_until(settled, timeout=90, what="every callback delivered or given up")
    assert got == []  # the open internal port got nothing
    [(headers, body)] = allowed_got
    key = callback_key("bz_token")
    assert headers["X-Boltz-Signature"] == (
        "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
    )
    assert json.loads(body)["id"] == made["allowed"].pk
    refused = {name: deliveries(a) for name, a in made.items() if name != "allowed"}
    assert all(not d["delivered"] for tries in refused.values() for d in tries)
    assert all("not sent: " in d["message"] for tries in refused.values() for d in tries)
    assert all(tries[-1]["message"].endswith("; giving up") for tries in refused.values())
    said = {
        name: [d["message"].replace(urls[name], "<url>") for d in refused[name]] for name in refused
    }
    assert said["open"] == said["closed"]
    print(f"\n{len(refused)} internal callback URLs refused at delivery, {len(got)} delivered")
    figure(
        f"{len(refused)} internal callback URLs refused by the worker in "
        f"{sum(len(tries) for tries in refused.values())} tries; the open internal port got "
        f"{len(got)}, the allowed receiver {len(allowed_got)}"
    )

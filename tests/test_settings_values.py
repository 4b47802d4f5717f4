"""Typed setting readers reject bad values with a message saying what to write."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from boltz_web.env_values import env_bool, env_bytes, env_int, parse_bytes, parse_seconds


def test_sizes_and_durations_parse():
    assert parse_bytes("512m") == 512 * 1024**2
    assert parse_bytes("2g") == 2 * 1024**3
    assert parse_bytes("100") == 100
    assert parse_seconds("5m") == 300 and parse_seconds("7d") == 604800 and parse_seconds(3) == 3


@pytest.mark.parametrize("value", ["lots", "5x", "-1m"])
def test_bad_sizes_are_refused(value):
    with pytest.raises(ValueError, match="is not a size"):
        parse_bytes(value)


def test_env_readers_name_the_variable(monkeypatch):
    monkeypatch.setenv("BOLTZ_X", "maybe")
    with pytest.raises(ImproperlyConfigured, match="BOLTZ_X='maybe'"):
        env_bool("BOLTZ_X", False)
    monkeypatch.setenv("BOLTZ_X", "two")
    with pytest.raises(ImproperlyConfigured, match="whole number"):
        env_int("BOLTZ_X", 1)
    monkeypatch.setenv("BOLTZ_X", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("BOLTZ_X", 1, minimum=1)
    monkeypatch.setenv("BOLTZ_X", "big")
    with pytest.raises(ImproperlyConfigured, match="BOLTZ_X"):
        env_bytes("BOLTZ_X", "1m")
    monkeypatch.setenv("BOLTZ_X", "yes")
    assert env_bool("BOLTZ_X", False) is True


def test_the_callback_allow_list_reads_names_and_networks(monkeypatch):
    import ipaddress

    from boltz_web.env_values import env_hosts_and_networks, parse_hosts_and_networks

    assert parse_hosts_and_networks(" Hooks.Internal., 10.1.0.0/16 ,127.0.0.1,[::1],,") == (
        "hooks.internal",
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("::1/128"),
    )
    assert parse_hosts_and_networks("") == ()
    monkeypatch.setenv("BOLTZ_CALLBACK_ALLOW", "hooks.internal,http://x")
    with pytest.raises(ImproperlyConfigured, match="BOLTZ_CALLBACK_ALLOW: 'http://x' is neither"):
        env_hosts_and_networks("BOLTZ_CALLBACK_ALLOW", "")

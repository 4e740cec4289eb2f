"""The loopback check the server commands and the Ray placement share."""

from __future__ import annotations

import pytest

from agentgym.net import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::", "example.com", "", "not a host"])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)

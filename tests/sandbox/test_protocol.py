"""The host's side of the runner protocol: framing, requests, replies."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.errors import SandboxError
from agentgym.sandbox import Limits
from agentgym.sandbox.protocol import FrameReader, build_request, encode, to_result


@given(st.lists(st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3), max_size=4),
       st.integers(min_value=1, max_value=7))
def test_frames_survive_any_split(messages: list[dict], piece: int) -> None:
    data = b"".join(encode(message) for message in messages)
    reader, seen = FrameReader(), []
    for start in range(0, len(data), piece):
        seen += reader.feed(data[start:start + piece])
    assert seen == messages


def test_a_request_carries_the_limits_and_the_files() -> None:
    limits = Limits(timeout=3, output_bytes=100, memory_mb=64)
    request = build_request("print(1)", language="python", stdin="x", files={"a/b": b"\x00"},
                            timeout=None, limits=limits, rlimit_memory=True, nproc=9)
    assert request["timeout"] == 3 and request["cpu_seconds"] == 3
    assert request["files"] == [["a/b", base64.b64encode(b"\x00").decode()]]
    assert request["memory_bytes"] == 64 * 1024 * 1024 and request["nproc"] == 9
    overridden = build_request("", language="bash", stdin="", files=None, timeout=0.5, limits=limits)
    assert overridden["timeout"] == 0.5 and overridden["cpu_seconds"] == 0.5
    assert "memory_bytes" not in overridden and "nproc" not in overridden


def test_a_runner_error_is_a_sandbox_error() -> None:
    with pytest.raises(SandboxError, match="The sandbox runner refused the request: bad field"):
        to_result({"error": "bad field"})

"""One local sandbox shared by the code env's tests (a runner process per run, nothing kept)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentgym.sandbox import LocalSandbox, Sandbox


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    with LocalSandbox() as local:
        yield local

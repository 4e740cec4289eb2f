"""The sandbox service against its own OpenAPI schema, fuzzed by schemathesis (slow).

``agentgym sandbox serve --backend local`` runs on a loopback port; ``st run``
sends it schema-valid and schema-invalid requests (bounded: 20 examples an
operation, 60 s of fuzzing) with every check on: no 5xx, every status and
body as the schema says, valid requests accepted, invalid ones refused. One
rule the schema cannot state (file names that collide) is kept out of the
generated bodies by ``schemathesis_hooks.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import pytest

from agentgym.serve.launch import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: Drops bodies whose file names collide, a rule JSON Schema cannot state (read it).
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")


def _st() -> str:
    pytest.importorskip("schemathesis")
    found = Path(sys.executable).with_name("st")
    return str(found) if found.exists() else shutil.which("st") or pytest.skip("no st command")


def _wait_for(url: str, process: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, "the service exited before it answered"
        try:
            if httpx2.get(f"{url}/health", timeout=5, trust_env=False).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer within {timeout} s"
        time.sleep(0.2)


def test_the_service_keeps_to_its_schema_under_fuzzing(tmp_path: Path) -> None:
    st = _st()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        service = subprocess.Popen(
            [sys.executable, "-m", "agentgym", "sandbox", "serve", "--backend", "local",
             "--port", str(port), "--pool-size", "2"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            _wait_for(url, service)
            fuzz = subprocess.run(
                [st, "run", f"{url}/openapi.json", "--checks", "all", "--max-examples", "20",
                 "--max-time", "45", "--request-timeout", "60", "--no-color"],
                capture_output=True, text=True, timeout=240, cwd=tmp_path, check=False,
                env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "NO_COLOR": "1"})
        finally:
            service.send_signal(signal.SIGTERM)
            try:
                service.wait(30)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait()
    assert fuzz.returncode == 0, fuzz.stdout[-6000:] + fuzz.stderr[-2000:]
    assert "Operations:       2 selected / 2 total" in fuzz.stdout, fuzz.stdout[-3000:]

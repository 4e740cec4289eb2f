"""The sandbox service (``sandbox/service.py``) and its client, ``RemoteSandbox``, over real HTTP.

Every service here is a real uvicorn server on a free loopback port, over a
real sandbox: the local one (runs everywhere) or the Docker pool (marked
``docker``). The ``agentgym sandbox serve`` command itself runs as a
subprocess in ``tests/cli/test_sandbox_serve_cmd.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import httpx2
import pytest
from sandbox_helpers import LIMITS

import agentgym  # noqa: F401 -- registers Code-LLM-v0
from agentgym.errors import ConfigError, SandboxError, SandboxUnavailable
from agentgym.sandbox import (DockerSandbox, Limits, LocalSandbox, RemoteSandbox, open_sandbox,
                              pick_backend)
from agentgym.sandbox.service import MAX_TIMEOUT, ServiceThread
from agentgym.sandbox.shared import close_all
from agentgym.tools.python import PythonTool, close_shared_sandbox

pytestmark = pytest.mark.timeout(120)

TWO_SUM = """
def two_sum(nums, target):
    seen = {}
    for i, x in enumerate(nums):
        if target - x in seen:
            return [seen[target - x], i]
        seen[x] = i
"""


@pytest.fixture(scope="module")
def local() -> Iterator[LocalSandbox]:
    with LocalSandbox(LIMITS) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def service(local: LocalSandbox) -> Iterator[ServiceThread]:
    with ServiceThread(local) as running:
        yield running


@pytest.fixture(scope="module")
def remote(service: ServiceThread) -> Iterator[RemoteSandbox]:
    with RemoteSandbox(service.url, LIMITS) as sandbox:
        yield sandbox


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)


def health(url: str, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.get(f"{url}/health", headers=headers, timeout=10, trust_env=False).json()


# -- runs through the service ------------------------------------------------------------


def test_a_run_comes_back_as_the_backend_would_give_it(remote: RemoteSandbox) -> None:
    result = remote.run("import sys\nprint(input() * 2, open('in.bin', 'rb').read())\n"
                        "print(open('notes/a.txt').read(), file=sys.stderr)\nraise SystemExit(3)",
                        stdin="ab\n", files={"in.bin": b"\xff\x00", "notes/a.txt": "héllo"})
    assert result.stdout == "abab b'\\xff\\x00'\n"
    assert result.stderr == "héllo\n" and result.exit_code == 3 and not result.ok
    assert remote.run("echo $((6 * 7))", language="bash").stdout == "42\n"
    assert remote.name == "remote" and "rlimits" in remote.isolation


def test_the_client_takes_the_services_limits_unless_given_its_own(service: ServiceThread) -> None:
    with RemoteSandbox(service.url) as remote:
        assert remote.limits == LIMITS  # the service's, e.g. for the code env's report size
    with RemoteSandbox(service.url, Limits(timeout=3.0)) as remote:
        assert remote.limits.timeout == 3.0
        assert remote.run("import time; time.sleep(10)").timed_out  # its timeout is sent


def test_a_timeout_kills_the_run_and_the_service_goes_on(remote: RemoteSandbox) -> None:
    result = remote.run("while True: pass", timeout=1)
    assert result.timed_out and result.exit_code is None
    assert remote.run("print('next')").stdout == "next\n"


def test_what_the_caller_got_wrong_raises_before_anything_is_sent(remote: RemoteSandbox) -> None:
    with pytest.raises(ConfigError, match="language must be one of python, bash; got 'ruby'"):
        remote.run("puts 1", language="ruby")
    with pytest.raises(ConfigError, match="not a relative path"):
        remote.run("print(1)", files={"../escape": "x"})


def test_code_over_the_services_cap_is_a_result_not_an_exception(remote: RemoteSandbox) -> None:
    result = remote.run("#" * 1_000_001)
    assert result.exit_code is None and not result.ok
    assert "the service refused the run" in result.stderr and "code" in result.stderr


@pytest.mark.slow
def test_runs_do_not_block_the_service_and_the_pool_size_bounds_them(local: LocalSandbox) -> None:
    with ServiceThread(local, pool_size=2) as service, RemoteSandbox(service.url) as remote:
        runs = [threading.Thread(target=remote.run, args=("import time; time.sleep(3)",))
                for _ in range(3)]
        for run in runs:
            run.start()
        # /health answers while runs are in flight: two run, the third waits for a slot.
        wait_until(lambda: health(service.url)["busy"] == 2 and health(service.url)["waiting"] == 1,
                   "two runs busy and one waiting")
        for run in runs:
            run.join()
        assert health(service.url) | {"isolation": ""} == {
            "status": "ok", "backend": local.name, "isolation": "", "pool_size": 2, "busy": 0,
            "waiting": 0, "runs": 3, "limits": dataclasses.asdict(LIMITS)}


@pytest.mark.parametrize(("body", "field"), [
    ({"code": "print(1)", "language": "ruby"}, "language"),
    ({"code": "print(1)", "timeout": 0}, "timeout"),
    ({"code": "print(1)", "timeout": True}, "timeout"),  # a bool is not 1 second
    ({"code": "print(1)", "timeout": "2"}, "timeout"),
    ({"code": 5}, "code"),
    ({"code": "print(1)", "files": {"x": {"base64": 5}}}, "files.x"),
    ({"code": "print(1)", "files": {"a\\..\\b": "x"}}, "files"),
    ({"code": "print(1)", "timeout": MAX_TIMEOUT + 1}, "timeout"),
    ({"code": "print(1)", "stdin": 5}, "stdin"),
    ({"code": "print(1)", "files": {"x": {"base64": "not base64!"}}}, "files.x"),
    ({"code": "print(1)", "memory_mb": 99999}, "memory_mb"),
    ({"language": "python"}, "code"),
    ({"code": "print(1)", "files": {"../../etc/passwd": "x"}}, "files"),
])
def test_a_bad_request_gets_a_4xx_naming_the_field(service: ServiceThread, body: dict,
                                                    field: str) -> None:
    response = httpx2.post(f"{service.url}/run", json=body, timeout=30, trust_env=False)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["param"] == field or error["param"].startswith(field), error
    assert field.split(".")[0] in error["message"]
    assert health(service.url)["status"] == "ok"  # still serving


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe{}", b"", b"[1]", b"null"])
def test_a_body_that_is_not_a_json_object_gets_the_services_own_error(service: ServiceThread,
                                                                       body: bytes) -> None:
    response = httpx2.post(f"{service.url}/run", content=body, timeout=30, trust_env=False,
                           headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert set(response.json()) == {"error"}  # not FastAPI's {"detail": ...}
    error = response.json()["error"]
    assert error["type"] == "InvalidRequest" and error["param"] is None, error
    assert "send a JSON object such as" in error["message"], error


def test_a_lone_surrogate_escaped_in_the_json_runs(service: ServiceThread) -> None:
    body = b'{"code": "print(ascii(input())) # \\ud800", "stdin": "a\\udfff"}'
    response = httpx2.post(f"{service.url}/run", content=body, timeout=30, trust_env=False,
                           headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.json()["stdout"] == "'a\\ufffd'\n"


def test_every_answer_is_in_the_schema_in_the_services_shape(service: ServiceThread) -> None:
    client = httpx2.Client(trust_env=False, timeout=30)
    with client:
        schema = client.get(f"{service.url}/openapi.json").json()
        wrong_method = client.put(f"{service.url}/run")
        nowhere = client.get(f"{service.url}/nowhere")
    run = schema["paths"]["/run"]["post"]["responses"]
    assert sorted(run) == ["200", "401", "411", "413", "422", "500", "503"]
    for status in sorted(set(run) - {"200"}):
        assert run[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorReply"}, status
    assert "HTTPValidationError" not in str(schema)  # FastAPI's shape is never answered
    assert schema["components"]["schemas"]["RunRequest"]["properties"]["timeout"]["anyOf"][0][
        "type"] == "number"
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert nowhere.status_code == 404
    for response in (wrong_method, nowhere):
        assert set(response.json()["error"]) == {"message", "type", "param"}, response.text


def test_bodies_that_are_not_json_or_too_big_are_refused(service: ServiceThread) -> None:
    client = httpx2.Client(trust_env=False, timeout=30)
    with client:
        not_json = client.post(f"{service.url}/run", content=b"{not json",
                               headers={"content-type": "application/json"})
        assert not_json.status_code == 422
        assert client.get(f"{service.url}/nowhere").status_code == 404
    # A body announced too big is refused from its headers, before it is read.
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    connection.putrequest("POST", "/run")
    connection.putheader("Content-Length", str(64 * 1024 * 1024))
    connection.endheaders()
    too_big = connection.getresponse()
    assert too_big.status == 413 and b"Content-Length" in too_big.read()
    connection.close()
    assert health(service.url)["status"] == "ok"


# -- the token ------------------------------------------------------------------------------


def test_a_token_is_required_when_the_service_has_one(local: LocalSandbox) -> None:
    with ServiceThread(local, token="s3cret") as service:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            response = httpx2.post(f"{service.url}/run", json={"code": "print(1)"},
                                   headers=headers, timeout=10, trust_env=False)
            assert response.status_code == 401 and "token" in response.json()["error"]["message"]
        with pytest.raises(SandboxUnavailable, match="refused the token .*AGENTGYM_SANDBOX_TOKEN"):
            RemoteSandbox(service.url)
        with RemoteSandbox(service.url, token="s3cret") as remote:
            assert remote.run("print(1)").stdout == "1\n"
        assert health(service.url, "s3cret")["runs"] == 1


def test_the_token_comes_from_the_environment(local: LocalSandbox,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGYM_SANDBOX_TOKEN", "from-env")
    with ServiceThread(local, token="from-env") as service, open_sandbox(service.url) as remote:
        assert remote.run("print(2)").stdout == "2\n"


# -- several hosts ------------------------------------------------------------------------


def test_runs_spread_over_two_services_and_survive_one_stopping(local: LocalSandbox) -> None:
    first, second = ServiceThread(local).start(), ServiceThread(local).start()
    try:
        with RemoteSandbox([first.url, second.url], cooldown=60) as remote:
            for i in range(6):
                assert remote.run(f"print({i})").stdout == f"{i}\n"
            assert health(first.url)["runs"] >= 2 and health(second.url)["runs"] >= 2
            first.stop()
            for i in range(6):  # the run that meets the stopped host goes to the other one
                assert remote.run(f"print({i})").stdout == f"{i}\n"
            assert health(second.url)["runs"] >= 8
            second.stop()
            with pytest.raises(SandboxError, match=f"No sandbox service could run the code: "
                                                   f".*{first.url}.*Connect"):
                remote.run("print(1)")
    finally:
        first.stop()
        second.stop()


def test_a_failed_host_sits_out_its_cool_down_then_gets_runs_again(local: LocalSandbox) -> None:
    first, second = ServiceThread(local).start(), ServiceThread(local).start()
    try:
        with RemoteSandbox([first.url, second.url], cooldown=1.0) as remote:
            first.stop()
            for _ in range(4):
                assert remote.run("print(1)").ok
            stopped = remote.hosts()[0]
            assert "Connect" in stopped["problem"]  # it failed once (and sat out its cool-down)
            first = ServiceThread(local, port=first.port).start()  # back, on the same port
            time.sleep(1.0)  # the cool-down
            for _ in range(4):
                assert remote.run("print(1)").ok
            assert health(first.url)["runs"] >= 1
    finally:
        first.stop()
        second.stop()


def test_no_service_answering_fails_at_open_with_the_fix(local: LocalSandbox) -> None:
    with ServiceThread(local) as service:
        url = service.url
    with pytest.raises(SandboxUnavailable, match="agentgym sandbox serve"):
        RemoteSandbox([url])


def test_arun_spreads_concurrent_runs(local: LocalSandbox) -> None:
    async def eight(remote: RemoteSandbox) -> list[str]:
        results = await asyncio.gather(*(remote.arun(f"print({i})") for i in range(8)))
        return [result.stdout for result in results]

    with ServiceThread(local) as first, ServiceThread(local) as second, \
            RemoteSandbox(f"{first.url},{second.url}") as remote:
        assert asyncio.run(eight(remote)) == [f"{i}\n" for i in range(8)]
        assert health(first.url)["runs"] > 0 and health(second.url)["runs"] > 0


# -- choosing the backend -----------------------------------------------------------------


def test_backend_strings_and_the_url_variable(service: ServiceThread,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGYM_SANDBOX_URL", raising=False)
    assert pick_backend("auto") == "auto"
    assert pick_backend("auto", service.url) == service.url
    with pytest.raises(ConfigError, match="not both"):
        pick_backend("local", service.url)
    with pytest.raises(ConfigError, match="is not a sandbox service URL"):
        open_sandbox("http://host:8100/run")
    with pytest.raises(ConfigError, match="needs urls= or AGENTGYM_SANDBOX_URL"):
        open_sandbox("remote")
    with pytest.raises(ConfigError, match="does not take pool_size"):
        open_sandbox(service.url, pool_size=3)
    monkeypatch.setenv("AGENTGYM_SANDBOX_URL", service.url)
    assert pick_backend("auto") == service.url and pick_backend("local") == "local"
    with open_sandbox("remote") as remote:
        assert remote.urls == [service.url] and remote.run("print(3)").stdout == "3\n"


def test_code_env_solves_a_problem_through_the_service(service: ServiceThread) -> None:
    env = gym.make("Code-LLM-v0", sandbox_url=service.url)
    try:
        env.reset(seed=0, options={"problem_id": "two_sum"})
        _, reward, terminated, _, info = env.step(f"```python\n{TWO_SUM}\n```")
        assert terminated and reward == 1.0 and info["success"] and info["sandbox"] == "remote"
    finally:
        env.close()
    with pytest.raises(ConfigError, match="sandbox_url must look like"):
        gym.make("Code-LLM-v0", sandbox_url="127.0.0.1:8100")


def test_python_tool_runs_through_the_service(service: ServiceThread,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        assert PythonTool(sandbox_url=service.url).call(code="print(6 * 7)") == "42"
        monkeypatch.setenv("AGENTGYM_SANDBOX_URL", service.url)
        assert PythonTool().call(code="print('via env')") == "via env"
    finally:
        close_shared_sandbox()
        close_all()


# -- the Docker pool behind the service ----------------------------------------------------


@pytest.mark.docker
def test_the_docker_pool_served(docker_sandbox: DockerSandbox) -> None:
    with ServiceThread(docker_sandbox, pool_size=4) as service, \
            RemoteSandbox(service.url, LIMITS) as remote:
        assert "container" in remote.isolation
        assert health(service.url)["backend"] == "docker"
        assert remote.run("import os; print(os.getuid() != 0)").stdout == "True\n"
        assert remote.run("while True: pass", timeout=1).timed_out
        assert remote.run("print(input())", stdin="docker\n").stdout == "docker\n"


class _BrokenOnce(LocalSandbox):
    """A backend with a bug: its first run raises something no backend should."""

    def __init__(self) -> None:
        super().__init__(LIMITS)
        self.broken = True

    def run(self, code: str, **kwargs: Any) -> Any:
        if self.broken:
            self.broken = False
            raise RuntimeError("boom")
        return super().run(code, **kwargs)


def test_a_bug_behind_the_service_is_a_500_and_the_service_goes_on() -> None:
    with _BrokenOnce() as sandbox, ServiceThread(sandbox) as running:
        failed = httpx2.post(f"{running.url}/run", json={"code": "print(1)"}, timeout=30, trust_env=False)
        assert failed.status_code == 500
        assert failed.json()["error"]["message"] == "internal error: RuntimeError: boom"
        again = httpx2.post(f"{running.url}/run", json={"code": "print(1)"}, timeout=30, trust_env=False)
        assert again.status_code == 200 and again.json()["stdout"] == "1\n"

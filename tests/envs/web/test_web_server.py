"""LoopbackServer: binds 127.0.0.1, serves an app with keep-alive, stops for real."""

from __future__ import annotations

import gc
import http.client

import pytest

from agentgym.envs.web.server import MAX_BODY_BYTES, LoopbackServer, Request, Response
from agentgym.errors import ConfigError
from fakes import refuses


def echo(request: Request) -> Response:
    if request.path == "/go":
        return Response(status=303, location="/there")
    return Response(f"{request.method} {request.path} {dict(request.query)} {dict(request.form)}",
                    content_type="text/plain")


def get(server: LoopbackServer, method: str, target: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_binds_loopback_and_serves_query_and_form() -> None:
    with LoopbackServer(echo) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server._httpd.server_address[0] == "127.0.0.1"
        assert get(server, "GET", "/a/b?x=1&x=2&y=") == (200, "GET /a/b {'x': '2', 'y': ''} {}")
        body = b"name=red+shirt&size=M"
        status, text = get(server, "POST", "/buy", body,
                           {"Content-Type": "application/x-www-form-urlencoded"})
        assert (status, text) == (200, "POST /buy {} {'name': 'red shirt', 'size': 'M'}")


def test_one_connection_serves_many_requests() -> None:
    with LoopbackServer(echo) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for number in range(5):
            connection.request("GET", f"/{number}")
            assert connection.getresponse().read().decode().startswith(f"GET /{number}")
        connection.close()


def test_redirects_carry_a_location() -> None:
    with LoopbackServer(echo) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("GET", "/go")
        response = connection.getresponse()
        response.read()
        assert (response.status, response.getheader("Location")) == (303, "/there")
        connection.close()


def test_bad_requests_get_4xx_answers() -> None:
    with LoopbackServer(echo) as server:
        assert get(server, "POST", "/x", b"", {"Content-Length": "lots"})[0] == 411
        too_big = {"Content-Length": str(MAX_BODY_BYTES + 1)}
        assert get(server, "POST", "/x", None, too_big)[0] == 413
        assert get(server, "DELETE", "/x")[0] == 501
        many = "&".join(f"k{i}=v" for i in range(1000))
        assert get(server, "GET", f"/x?{many}") == (200, "GET /x {} {}")  # too many fields: ignored


def test_stop_closes_the_port_and_open_connections() -> None:
    server = LoopbackServer(echo)
    port = server.port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/")
    connection.getresponse().read()
    server.stop()
    assert not server.running
    assert refuses(port)
    # The kept-alive connection was shut too: a request on it gets no answer.
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        connection.request("GET", "/")
        connection.getresponse()
    connection.close()
    server.stop()  # twice is fine


def test_a_dropped_server_stops_itself() -> None:
    server = LoopbackServer(echo)
    port = server.port
    del server
    gc.collect()
    assert refuses(port)


def test_the_app_can_be_swapped() -> None:
    with LoopbackServer(echo) as server:
        server.app = lambda request: Response("other", content_type="text/plain")
        assert get(server, "GET", "/") == (200, "other")


def test_an_app_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="LoopbackServer needs a callable app, got str"):
        LoopbackServer("not an app")  # type: ignore[arg-type]

"""The Chromium backend: pages built by JavaScript, POSTs, hosts kept out. Skips without Chromium."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator

import pytest

from agentgym.envs.web.browser import Browser
from agentgym.envs.web.chromium import ChromiumFetcher, find_chromium
from agentgym.envs.web.env import WebShopEnv
from agentgym.envs.web.server import LoopbackServer, Request, Response
from web_shopper import shop

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                       reason="playwright is not installed (scripts/setup.sh browser)"),
    pytest.mark.skipif(find_chromium() is None,
                       reason="no Chromium binary (apt-get install chromium)"),
]

SCRIPTED = """<title>Built by script</title><div id="app">loading...</div><script>
document.getElementById("app").innerHTML =
  '<a href="/next">A link made by JavaScript</a>' +
  '<form method="post" action="/echo"><input name="word" value="hello"><button>Send</button></form>';
fetch("http://localhost:" + location.port + "/beacon").catch(() => {})
  .finally(() => fetch("/after"));
</script>"""

SPA = """<title>App</title><p id="out">empty</p><script>
window.addEventListener("load", () => fetch("/data").then(r => r.json())
  .then(d => { document.getElementById("out").textContent = d.name; }));
</script>"""


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    seen: list[str] = []

    def app(request: Request) -> Response:
        seen.append(request.path)
        if request.path == "/echo":
            return Response(f"<title>Echo</title><p>{request.method} {dict(request.form)}</p>")
        if request.path == "/data":
            return Response('{"name": "fetched after load"}', content_type="application/json")
        if request.path == "/spa":
            return Response(SPA)
        if request.path == "/next":
            return Response("<title>Next</title><p>followed</p>")
        return Response(SCRIPTED)

    with LoopbackServer(app) as running:
        running.seen = seen  # type: ignore[attr-defined]
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Only 127.0.0.1: the page's request to "localhost" (also this machine) must be stopped.
    opened = Browser(backend="chromium", allowed_hosts={"127.0.0.1"})
    yield opened
    opened.close()


def test_javascript_builds_the_page_the_agent_reads(server: LoopbackServer, browser: Browser) -> None:
    page = browser.open(f"{server.url}/")
    assert page.view() == ('Built by script\n[1] A link made by JavaScript\n[text box word: "hello"] '
                           "[2] (button) Send")
    assert Browser().open(f"{server.url}/").view() == "Built by script\nloading..."  # http: no JS


def test_links_and_posts_are_followed_in_chromium(server: LoopbackServer, browser: Browser) -> None:
    browser.open(f"{server.url}/")
    assert browser.click(1).view() == "Next\nfollowed"
    browser.back()
    assert browser.click(2).view() == "Echo\nPOST {'word': 'hello'}"


def _beacon_sent(server: LoopbackServer, browser: Browser) -> bool:
    """Load the page; once its script's second request ("/after") arrives, say whether its
    first one, to "localhost", reached the server."""
    seen: list[str] = server.seen  # type: ignore[attr-defined]
    seen.clear()
    browser.open(f"{server.url}/")
    deadline = time.monotonic() + 30  # a limit, not a measurement
    while "/after" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "/after" in seen
    return "/beacon" in seen


def test_requests_to_hosts_not_allowed_are_aborted(server: LoopbackServer, browser: Browser) -> None:
    assert not _beacon_sent(server, browser)
    permissive = Browser(backend="chromium", allowed_hosts={"127.0.0.1", "localhost"})
    assert _beacon_sent(server, permissive)  # the same page does reach an allowed host
    permissive.close()


def test_networkidle_waits_for_content_fetched_after_load(server: LoopbackServer) -> None:
    browser = Browser(backend=ChromiumFetcher(allowed_hosts={"127.0.0.1"}, wait_until="networkidle"))
    assert browser.open(f"{server.url}/spa").view() == "App\nfetched after load"
    browser.close()


def test_webshop_with_the_chromium_backend() -> None:
    env = WebShopEnv(backend="chromium")
    episode = shop(env, seed=0)
    assert episode.success
    env.close()

"""Browser and the browser tool, against real pages served on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentgym.envs.web.browser import Browser, BrowserTool, HttpFetcher, parse_command
from agentgym.envs.web.server import LoopbackServer, Request, Response
from agentgym.errors import BrowserError, ConfigError, ToolInputError
from agentgym.tools import ToolWrapper
from fakes import EchoEnv

PAGES = {
    "/": "<title>Home</title><a href='/list?page=1'>List</a> <a href='/missing'>Broken</a>"
         "<form action='/find'><input name='q'><button>Find</button></form>",
    "/list": "<title>List</title><a href='/item/1'>Item one</a> <a href='/item/2'>Item two</a>",
    "/item/1": "<title>Item one</title><form method='post' action='/order'>"
               "<select name='size'><option value=''>pick</option><option>S</option><option>M</option>"
               "</select><button>Order</button></form>",
}


def site(request: Request) -> Response:
    if request.path == "/find":
        return Response(f"<title>Found</title><p>You searched {request.query.get('q', '')!r}</p>")
    if request.path == "/order":
        if request.method != "POST":
            return Response("<p>post only</p>", 405)
        return Response(status=303, location=f"/done?size={request.form.get('size', '')}")
    if request.path == "/done":
        return Response(f"<title>Done</title><p>Ordered size {request.query.get('size')}</p>")
    if request.path == "/loop":
        return Response(status=302, location="/loop")
    if request.path == "/keep":
        return Response(status=307, location="/order")
    if request.path == "/text":
        return Response("line one\nline two", content_type="text/plain")
    if request.path == "/binary":
        return Response("\x89PNG", content_type="image/png")
    if request.path == "/big":
        return Response("<p>" + "word " * 5000 + "</p>")
    if request.path in PAGES:
        return Response(PAGES[request.path])
    return Response("<title>Not found</title>", 404)


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(site) as running:
        yield running


@pytest.fixture
def browser() -> Iterator[Browser]:
    opened = Browser()
    yield opened
    opened.close()


@pytest.mark.parametrize(("text", "parsed"), [
    ("click[3]", ("click", "3")),
    ("  CLICK [ 3 ] ", ("click", "3")),
    ("search[red [cotton] shirt]", ("search", "red [cotton] shirt")),
    ("back", ("back", "")),
    ("Buy", ("buy", "")),
    ("http://127.0.0.1:8000/a?b=c", ("open", "http://127.0.0.1:8000/a?b=c")),
    ("open[/cart]", ("open", "/cart")),
    ("click 3", None),
    ("I will click[3]", None),
    ("", None),
    ("http://a b", None),
])
def test_parse_command(text: str, parsed: tuple[str, str] | None) -> None:
    assert parse_command(text) == parsed


def test_open_click_search_select_submit_back(server: LoopbackServer, browser: Browser) -> None:
    browser.open(f"{server.url}/")
    assert browser.view() == "Home\n[1] List [2] Broken\n[text box q] [3] (button) Find"
    assert browser.click(1).title == "List"
    assert browser.click("item one").title == "Item one"  # by its words, any case
    browser.select("M")
    done = browser.click(1)  # the Order button: a POST, then a 303 to GET /done
    assert done.view() == "Done\nOrdered size M"
    assert browser.back().title == "Item one"
    assert "chosen: M" in browser.view()  # back shows the page as it was left
    browser.open("/")  # relative to the current page
    assert browser.search("red shirt & more").view() == "Found\nYou searched 'red shirt & more'"


def test_statuses_text_and_binary_pages(server: LoopbackServer, browser: Browser) -> None:
    assert browser.open(f"{server.url}/missing").view() == "Not found\n(HTTP status 404)"
    assert browser.open("/text").view() == "line one\nline two"
    assert browser.open("/binary").view() == "[image/png content: not shown as text]"


def test_a_307_redirect_keeps_the_post(server: LoopbackServer, browser: Browser) -> None:
    browser.open(f"{server.url}/")
    assert browser.open("/keep", method="POST", data=[("size", "S")]).view() == "Done\nOrdered size S"


def test_redirect_loops_stop(server: LoopbackServer, browser: Browser) -> None:
    with pytest.raises(BrowserError, match="redirected more than 5 times"):
        browser.open(f"{server.url}/loop")


def test_long_pages_are_cut(server: LoopbackServer) -> None:
    browser = Browser(backend=HttpFetcher(max_bytes=1000))
    text = browser.open(f"{server.url}/big").view()
    assert text.endswith("[... the page was too long: the rest was not loaded ...]")
    assert browser.view(max_chars=200).endswith("[... page cut: it goes on ...]")
    assert len(browser.view(max_chars=200)) == 200
    browser.close()


def test_agent_mistakes_are_tool_input_errors(server: LoopbackServer, browser: Browser) -> None:
    with pytest.raises(ToolInputError, match=r"no page is open yet; open a URL first"):
        browser.click(1)
    browser.open(f"{server.url}/list")
    with pytest.raises(ToolInputError, match=r"there is no link or button \[9\] on this page "
                                             r"\(they go from 1 to 2\)"):
        browser.click(9)
    with pytest.raises(ToolInputError, match="no link or button on this page reads 'Item three'"):
        browser.click("Item three")
    with pytest.raises(ToolInputError, match="this page has no search box"):
        browser.search("x")
    with pytest.raises(ToolInputError, match="this page has no 'Buy now' or 'Checkout' button"):
        browser.press("Buy now", "Checkout")
    with pytest.raises(ToolInputError, match="'dance' is not a browser command"):
        browser.act("dance")
    with pytest.raises(ToolInputError, match=r"click\[...\] needs something inside the brackets"):
        browser.act("click[]")
    browser.clear()
    browser.open(f"{server.url}/")
    with pytest.raises(ToolInputError, match="there is no previous page to go back to"):
        browser.back()


def test_only_allowed_hosts_are_fetched(browser: Browser) -> None:
    # Refused before any connection is made: no packet leaves the machine.
    with pytest.raises(BrowserError, match=r"fetching from 'example.invalid' is not allowed; this "
                                           r"browser may fetch from 127.0.0.1, ::1, localhost"):
        browser.open("http://example.invalid/")
    with pytest.raises(BrowserError, match="'ftp://127.0.0.1/' is not an http\\(s\\) URL"):
        browser.open("ftp://127.0.0.1/")
    with pytest.raises(BrowserError, match="is not a valid URL"):
        browser.open("http://127.0.0.1:99999/")


def test_a_closed_port_is_a_browser_error(browser: Browser) -> None:
    with LoopbackServer(site) as gone:
        url = gone.url
    with pytest.raises(BrowserError, match="could not fetch"):
        browser.open(url)


def test_a_connection_the_server_dropped_is_retried(browser: Browser) -> None:
    with LoopbackServer(site) as first:
        browser.open(f"{first.url}/list")
        # Shut the kept-alive connection from the server's side, as an idle timeout would.
        for connection in list(first._httpd.connections):
            connection.shutdown(2)
        assert browser.click(1).title == "Item one"


def test_unknown_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="backend must be 'http', 'chromium' or a Fetcher, got 'lynx'"):
        Browser(backend="lynx")


def test_chromium_settings_are_checked_before_anything_starts() -> None:
    from agentgym.envs.web.chromium import ChromiumFetcher

    with pytest.raises(ConfigError, match="wait_until must be one of load, domcontentloaded, "
                                          "networkidle, got 'soon'"):
        ChromiumFetcher(wait_until="soon")


def test_browser_tool_answers_with_pages_and_error_texts(server: LoopbackServer) -> None:
    tool = BrowserTool(start_url=f"{server.url}/")
    tool.validate()
    assert tool.openai_schema()["function"]["name"] == "browser"
    page = tool.call(command="click[1]")
    assert page.startswith(f"List\nURL: {server.url}/list?page=1\n[1] Item one")
    assert tool.call(command="click[7]").startswith("Error: there is no link or button [7]")
    assert tool.call(command="http://example.invalid/").startswith(
        "Error: fetching from 'example.invalid' is not allowed")
    assert tool.call(command=3).startswith("Error: browser: argument 'command' must be of type string")
    assert tool.call(command="back").startswith("Home")
    tool.close()


def test_browser_tool_in_a_tool_wrapper(server: LoopbackServer) -> None:
    env = ToolWrapper(EchoEnv(max_turns=3), [BrowserTool(start_url=f"{server.url}/")], max_calls=3)
    env.reset(seed=0)
    observation, _, terminated, truncated, _ = env.step("<browser>click[1]</browser>")
    assert "[1] Item one [2] Item two" in observation
    assert not terminated and not truncated
    assert "browser" in env.get_wrapper_attr("instructions")
    env.close()

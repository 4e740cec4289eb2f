"""HTML to the text view: what is shown, numbered, hidden; forms; malformed and hostile HTML."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.envs.web.page import parse_page, parse_text_page
from agentgym.errors import ToolInputError

URL = "http://127.0.0.1:8000/shop/item"


def view(html: str) -> str:
    return parse_page(html, URL).view()


def test_title_text_and_numbered_links_in_document_order() -> None:
    page = parse_page("<title> A &amp; B </title><p>Hello <b>big</b> world</p>"
                      "<a href='/x'>First</a> and <a href='y?q=1#frag'>Second</a>", URL)
    assert page.view() == "A & B\nHello big world\n[1] First and [2] Second"
    assert page.links[1].url == "http://127.0.0.1:8000/x"
    assert page.links[2].url == "http://127.0.0.1:8000/shop/y?q=1"  # relative, fragment dropped
    assert [link.text for link in page.links.values()] == ["First", "Second"]


def test_scripts_styles_templates_and_hidden_elements_are_not_shown() -> None:
    text = view("<style>p{}</style><script>document.write('<a href=/s>s</a>')</script>"
                "<template><a href=/t>t</a></template><svg><text>drawn</text></svg>"
                "<div hidden><a href=/h>h</a></div><p style='display: none'>gone</p>"
                "<span style='visibility:hidden'>gone too</span><p>kept</p>"
                "<noscript>shown: no script runs here</noscript>")
    assert text == "kept\nshown: no script runs here"


def test_links_a_fetch_cannot_follow_are_text_without_a_number() -> None:
    page = parse_page("<a href='#top'>Top</a> <a href='javascript:go()'>Go</a> "
                      "<a href='mailto:a@b.c'>Mail</a> <a>No href</a> <a href='http://[::1'>Bad</a>", URL)
    assert page.links == {}
    assert page.view() == "Top Go Mail No href Bad"


def test_an_empty_link_gets_a_label_and_an_image_its_alt_text() -> None:
    page = parse_page("<a href='/cart' aria-label='Cart'></a><a href='/p/7'></a>"
                      "<a href='/img'><img src=x alt='Red shirt'></a>", URL)
    assert [link.text for link in page.links.values()] == ["Cart", "/p/7", "[image: Red shirt]"]


def test_blocks_break_lines_and_tables_separate_cells() -> None:
    text = view("<div>one</div>two<br>three<ul><li>a</li><li>b</li></ul>"
                "<table><tr><th>k</th><td>v</td></tr><tr><td>1<td>2</table><pre>x\n  y</pre>")
    assert text.splitlines() == ["one", "two", "three", "a", "b", "k | v", "1 | 2", "x", "y"]


def test_base_href_changes_where_relative_links_go() -> None:
    page = parse_page("<head><base href='http://127.0.0.1:9/root/'></head><a href='x'>x</a>", URL)
    assert page.links[1].url == "http://127.0.0.1:9/root/x"


FORM = """
<form action="/search"><input type="search" name="q" placeholder="Search"><button>Go</button></form>
<form method="POST" action="/cart/add">
  <input type="hidden" name="pid" value="7">
  <select name="size"><option value="">choose a size</option><option>S</option>
    <option value="M">Medium</option></select>
  <input type="radio" name="colour" value="red"> <input type="radio" name="colour" value="blue" checked>
  <input type="checkbox" name="gift" value="yes">
  <textarea name="note">hi</textarea> <input type="password" name="pw" value="secret">
  <button type="submit" name="do" value="add">Add to cart</button>
  <button formaction="/buy">Buy now</button>
  <input type="submit" value="Save"> <button type="button">Share</button>
</form>
<button>Outside any form</button>
"""


def test_form_fields_and_buttons_are_shown_with_their_state() -> None:
    page = parse_page(FORM, URL)
    lines = page.view().splitlines()
    assert lines[0] == '[text box q (placeholder "Search")] [1] (button) Go'
    assert lines[1] == (
        "[select size: S | Medium; chosen: none] [radio colour: red | blue; chosen: blue] "
        "[checkbox gift: yes, unchecked] [text area note: \"hi\"] [password box pw] "
        "[2] (button) Add to cart [3] (button) Buy now [4] (button) Save (button: Share)")
    assert lines[2] == "(button: Outside any form)"  # no number: nothing a fetch could submit
    assert "secret" not in page.view()
    assert page.buttons[3].action == "http://127.0.0.1:8000/buy"
    assert page.buttons[3].method == "POST"


def test_form_data_follows_html_rules() -> None:
    page = parse_page(FORM, URL)
    form = page.forms[1]
    assert form.data(page.buttons[2]) == [("pid", "7"), ("size", ""), ("colour", "blue"),
                                          ("note", "hi"), ("pw", "secret"), ("do", "add")]
    page.choose("medium")
    page.choose("gift=yes")
    assert form.data(page.buttons[3]) == [("pid", "7"), ("size", "M"), ("colour", "blue"),
                                          ("gift", "yes"), ("note", "hi"), ("pw", "secret")]
    assert "[select size: S | Medium; chosen: Medium]" in page.view()


def test_a_select_with_no_selected_option_sends_its_first() -> None:
    page = parse_page("<form><select name=n><option>a<option>b</select></form>", URL)
    assert page.forms[0].data() == [("n", "a")]
    assert "chosen: a" in page.view()


def test_choose_by_label_value_or_named_field() -> None:
    page = parse_page("<form><select name=size><option>S<option>M</select>"
                      "<select name=fit><option>M<option>L</select></form>", URL)
    with pytest.raises(ToolInputError, match=r"'M' is an option of several fields \(size, fit\); "
                                             r"name the field, e.g. select\[size=M\]"):
        page.choose("M")
    field, value = page.choose("fit = m")
    assert (field.name, value) == ("fit", "M")
    assert page.choose("  l. ")[1] == "L"  # case, spaces and end punctuation do not matter
    with pytest.raises(ToolInputError, match=r"no field on this page offers 'XL'. Options here: "
                                             r"size: S \| M; fit: M \| L"):
        page.choose("XL")


def test_choose_on_a_page_without_options_says_so() -> None:
    with pytest.raises(ToolInputError, match="this page has no options to select"):
        parse_page("<p>plain</p>", URL).choose("M")


def test_malformed_html_is_repaired_as_a_browser_would() -> None:
    page = parse_page("<p>one<p>two<a href=/a>link<div>block</a>after</b></i></table>"
                      "<form action=/f><form action=/g><input name=x></form>", URL)
    assert "[1] link" in page.view()
    assert len([form for form in page.forms if form.fields]) == 1  # nested forms are ignored


def test_deep_nesting_does_not_recurse() -> None:
    text = view("<div>" * 20_000 + "<a href='/deep'>deep</a>" + "</div>" * 20_000)
    assert text == "[1] deep"


def test_plain_text_pages_keep_their_lines() -> None:
    page = parse_text_page("a\n\nb <not a tag>", URL, status=404)
    assert page.view() == "(HTTP status 404)\na\nb <not a tag>"
    assert page.links == {}


TRICKY = [
    "", "<", "<<<>>>", "</", "<a href", "<a href='", "<!--", "<![CDATA[x", "<!DOCTYPE", "&#0;&#xD800;&#99999999;",
    "<select><option>", "<form><button>", "<input type=radio>", "<svg><a href=/x>svg</a></svg>",
    "\x00\x01\ud800\udfff", "<title>" * 100, "<a href=" + "x" * 100_000 + ">", "<table>" * 500,
]


@pytest.mark.parametrize("html", TRICKY)
def test_tricky_markup_parses(html: str) -> None:
    page = parse_page(html, URL)
    assert isinstance(page.view(show_url=True), str)


_TAGS = st.sampled_from(["a", "p", "div", "form", "select", "option", "input", "button", "table",
                         "td", "tr", "script", "style", "pre", "br", "img", "textarea", "base",
                         "title", "label", "template", "svg", "li"])
_ATTRS = st.sampled_from(["href", "action", "method", "name", "value", "type", "selected",
                          "checked", "hidden", "style", "formaction", "alt"])
_PIECE = st.one_of(
    st.text(max_size=20),
    st.builds(lambda t, a, v: f"<{t} {a}='{v}'>", _TAGS, _ATTRS, st.text(max_size=15)),
    st.builds(lambda t: f"</{t}>", _TAGS),
    st.sampled_from(["<", ">", "&", "&amp", "<!--", "-->", "'", '"', "=", "\x00", "\ud800"]),
)


@given(pieces=st.lists(_PIECE, max_size=40), base=st.text(max_size=30))
def test_any_markup_parses_and_renders(pieces: list[str], base: str) -> None:
    page = parse_page("".join(pieces), base or URL)
    text = page.view(show_url=True)
    assert isinstance(text, str)
    for item in page.fields():
        if item.options:
            try:
                page.choose(item.options[-1][1] or "x")
            except ToolInputError:
                pass  # several fields offer it, or an empty label: a message, not a crash

"""HTML to the text view an agent reads: visible text, numbered links and buttons, form fields.

:func:`parse_page` reads any HTML (malformed, hostile, huge) with selectolax's
Lexbor engine, an HTML5 parser that builds the tree the way a browser does, and
never raises on markup. The result is a :class:`Page`: the text of the page in
document order, where every link and every submit button of a form carries a
number (``[3] Next page``), and every form field is written with its name and
current value, e.g. ``[select size: S | M | L; chosen: none]``. Picking an
option (:meth:`Page.choose`) changes the field, and :meth:`Page.view` shows it.

What is left out: ``<script>``, ``<style>``, ``<template>``, ``<svg>``, frames,
media, and elements marked ``hidden`` or styled ``display: none`` or
``visibility: hidden``. ``<noscript>`` content is shown: the text view is what a
browser without JavaScript shows (the Chromium backend runs the scripts first).
Links that go nowhere a fetch can follow (``#top``, ``javascript:``,
``mailto:``) are shown as text without a number.

>>> page = parse_page('<title>Shop</title><a href="/cart">Cart</a>', "http://127.0.0.1:8000/")
>>> print(page.view())
Shop
[1] Cart
>>> page.links[1].url
'http://127.0.0.1:8000/cart'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from agentgym.errors import MissingDependencyError, ToolInputError
from agentgym.parsing import normalize

try:
    from selectolax.lexbor import LexborHTMLParser, LexborNode
except ImportError as _error:  # pragma: no cover - depends on the install
    raise MissingDependencyError(
        "The web envs and the browser tool read HTML with selectolax, which is not installed: "
        f"{MissingDependencyError.install_hint('web', 'selectolax')}."
    ) from _error

__all__ = ["Button", "Field", "Form", "Link", "Page", "parse_page", "parse_text_page"]

# Content a reader never sees.
_SKIPPED = frozenset({"script", "style", "template", "svg", "math", "iframe",
                      "frame", "frameset", "object", "embed", "canvas", "head", "datalist",
                      "audio", "video", "map"})
# Elements that start and end a line of their own.
_BLOCKS = frozenset({"address", "article", "aside", "blockquote", "body", "caption", "dd",
                     "details", "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure",
                     "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li",
                     "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
                     "thead", "tfoot", "tr", "ul", "legend", "label"})
_CELLS = frozenset({"td", "th"})
_TEXT_INPUTS = frozenset({"text", "search", "email", "url", "tel", "number", "password", "date",
                          "month", "week", "time", "datetime-local", "color", "range"})
_SUBMIT_INPUTS = frozenset({"submit", "image"})
_FOLLOWABLE = ("http", "https")
_CELL_END = " | "


@dataclass(slots=True)
class Link:
    """A numbered link: what it says and where it goes (an absolute URL)."""

    number: int
    text: str
    url: str


@dataclass(slots=True)
class Field:
    """A form field and its current value.

    ``kind`` is ``"text"``, ``"password"``, ``"textarea"``, ``"hidden"``,
    ``"select"``, ``"radio"`` (a group of radio buttons sharing a name) or
    ``"checkbox"``. ``options`` holds ``(value, label)`` pairs of a select or
    radio group (a checkbox has one: its value). ``value`` is what the form
    sends; ``""`` sends nothing for a radio group or checkbox.
    """

    name: str
    kind: str
    value: str = ""
    options: list[tuple[str, str]] = field(default_factory=list)
    placeholder: str = ""

    def label_of(self, value: str) -> str:
        """The label shown for option ``value`` (the value itself if it has none)."""
        return next((label for option, label in self.options if option == value), value)


@dataclass(slots=True)
class Form:
    """A form: where it is sent, how, and its fields in document order."""

    action: str
    method: str
    fields: list[Field] = field(default_factory=list)

    def data(self, button: Button | None = None) -> list[tuple[str, str]]:
        """The name/value pairs the form sends when ``button`` submits it (HTML's rules)."""
        pairs: list[tuple[str, str]] = []
        for item in self.fields:
            if not item.name or (item.kind in ("radio", "checkbox") and not item.value):
                continue
            pairs.append((item.name, item.value))
        if button is not None and button.name:
            pairs.append((button.name, button.value))
        return pairs


@dataclass(slots=True)
class Button:
    """A numbered submit button of a form (``formaction``/``formmethod`` already applied)."""

    number: int
    text: str
    form: Form
    action: str
    method: str
    name: str = ""
    value: str = ""


@dataclass(slots=True)
class Page:
    """A parsed page: title, text view, numbered links and buttons, forms."""

    url: str
    title: str = ""
    status: int = 200
    links: dict[int, Link] = field(default_factory=dict)
    buttons: dict[int, Button] = field(default_factory=dict)
    forms: list[Form] = field(default_factory=list)
    # The body, line by line; a line is text pieces and the fields to show there.
    lines: list[list[str | Field]] = field(default_factory=list)

    def fields(self) -> Iterator[Field]:
        """Every visible field the agent can set (hidden inputs left out)."""
        for form in self.forms:
            yield from (item for item in form.fields if item.kind != "hidden")

    def choose(self, wanted: str) -> tuple[Field, str]:
        """Pick an option, as a person clicks one: ``"M"``, or ``"size=M"`` when several fields offer M.

        Sets the field that offers it and returns the field and the option's
        value. Raises :class:`ToolInputError` (with what can be chosen) when no
        field, or more than one, offers it.
        """
        choices = [item for item in self.fields() if item.kind in ("select", "radio", "checkbox")]
        if not choices:
            raise ToolInputError("this page has no options to select.")
        candidates, target = choices, normalize(wanted)
        for separator in ("=", ":"):
            name, found, value = wanted.partition(separator)
            named = [item for item in choices if found and normalize(item.name) == normalize(name)]
            if named:
                candidates, target = named, normalize(value)
                break
        matches = [(item, value) for item in candidates for value, label in item.options
                   if value and target in (normalize(label), normalize(value))]
        if not matches:
            offered = "; ".join(f"{item.name or '(unnamed)'}: "
                                f"{' | '.join(label for value, label in item.options if value)}"
                                for item in choices)
            raise ToolInputError(f"no field on this page offers {wanted[:60]!r}. Options here: {offered}.")
        if len({id(item) for item, _ in matches}) > 1:
            names = ", ".join(dict.fromkeys(item.name or "(unnamed)" for item, _ in matches))
            first, value = matches[0]
            raise ToolInputError(f"{wanted[:60]!r} is an option of several fields ({names}); "
                                 f"name the field, e.g. select[{first.name}={first.label_of(value)}].")
        item, value = matches[0]
        item.value = value
        return item, value

    def view(self, *, show_url: bool = False) -> str:
        """The page as the agent reads it."""
        out = [self.title] if self.title else []
        if show_url:
            out.append(f"URL: {self.url}")
        if self.status >= 400:
            out.append(f"(HTTP status {self.status})")
        for line in self.lines:
            text = "".join(piece if isinstance(piece, str) else _show_field(piece) for piece in line)
            text = " ".join(text.split())
            if text:
                out.append(text)
        return "\n".join(out)


def _show_field(item: Field) -> str:
    if item.kind in ("select", "radio"):
        labels = " | ".join(label for value, label in item.options if value) or "no options"
        chosen = item.label_of(item.value) if item.value else "none"
        return f" [{item.kind} {item.name}: {labels}; chosen: {chosen}] "
    if item.kind == "checkbox":
        state = "checked" if item.value else "unchecked"
        return f" [checkbox {item.name}: {item.options[0][1] if item.options else 'on'}, {state}] "
    kind = {"password": "password box", "textarea": "text area"}.get(item.kind, "text box")
    shown = f': "{item.value}"' if item.value and item.kind != "password" else ""
    hint = f' (placeholder "{item.placeholder}")' if item.placeholder and not item.value else ""
    return f" [{kind} {item.name or '(unnamed)'}{shown}{hint}] "


def parse_text_page(text: str, url: str, *, status: int = 200) -> Page:
    """A page for a plain-text response: its lines, no links."""
    return Page(url=url, status=status, lines=[[line] for line in text.splitlines()])


def parse_page(html: str, url: str, *, status: int = 200) -> Page:
    """Parse ``html`` fetched from ``url`` into a :class:`Page`. Never raises on markup."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    base_node = tree.css_first("base[href]")
    base = _join(url, base_node.attributes.get("href") or "") if base_node is not None else url
    page = Page(url=url, title=title, status=status)
    builder = _Builder(page, base or url)
    root = tree.body
    if root is not None:
        builder.walk(root)
    builder.flush()
    return page


def _join(base: str, href: str) -> str | None:
    """``href`` made absolute against ``base``; ``None`` when it is malformed."""
    try:
        return urljoin(base, href.strip())
    except ValueError:  # e.g. "http://[::1" (an unclosed IPv6 bracket)
        return None


def _followable(base: str, href: str | None) -> str | None:
    """The absolute URL a link leads to, or ``None`` if a fetch cannot follow it."""
    if href is None or not href.strip() or href.strip().startswith("#"):
        return None
    absolute = _join(base, href)
    if absolute is None:
        return None
    try:
        parts = urlsplit(absolute)
    except ValueError:
        return None
    if parts.scheme not in _FOLLOWABLE or not parts.netloc:
        return None
    return absolute.split("#", 1)[0]


def _hidden(node: LexborNode) -> bool:
    attributes = node.attributes
    if "hidden" in attributes:
        return True
    style = (attributes.get("style") or "").lower().replace(" ", "")
    return "display:none" in style or "visibility:hidden" in style


class _Builder:
    """Walks the tree once, writing lines and collecting links, buttons and forms."""

    def __init__(self, page: Page, base: str) -> None:
        self.page = page
        self.base = base
        self.line: list[str | Field] = []
        self.number = 0
        self.forms: list[tuple[str, Form]] = []  # open <form>s (key, form), innermost last
        self.loose: Form | None = None  # holds fields that are in no form
        self.radios: dict[tuple[int, str], Field] = {}
        self.pre = 0
        # A link's number and the length of the line when it opened, to give an
        # empty link a fallback label.
        self.open_links: list[tuple[int, int, str]] = []

    # -- the walk -------------------------------------------------------------

    def walk(self, root: LexborNode) -> None:
        """Visit every node under ``root`` in document order (no recursion: deep trees are fine).

        ``exit`` runs only for elements whose ``enter`` asked to descend.
        """
        node = root.child
        depth = 1
        while node is not None:
            if self.enter(node):
                child = node.child
                if child is not None:
                    node, depth = child, depth + 1
                    continue
                self.exit(node)
            while True:
                sibling = node.next
                if sibling is not None:
                    node = sibling
                    break
                depth -= 1
                parent = node.parent
                if depth == 0 or parent is None:
                    return
                node = parent
                self.exit(node)

    def enter(self, node: LexborNode) -> bool:
        """Handle the start of ``node``; True to descend into its children."""
        if node.is_text_node:
            self.text(node.text_content or "")
            return False
        tag = node.tag or ""
        if tag.startswith("-") or tag in _SKIPPED or _hidden(node):
            return False
        if tag in _BLOCKS:
            self.newline()
        handler = _ENTER.get(tag)
        return handler(self, node) if handler is not None else True

    def exit(self, node: LexborNode) -> None:
        """Handle the end of an element whose children were visited (or skipped)."""
        tag = node.tag or ""
        if tag == "a" and self.open_links and self.open_links[-1][2] == _node_key(node):
            self.close_link(node)
        elif tag == "form" and self.forms and self.forms[-1][0] == _node_key(node):
            self.forms.pop()
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
        elif tag == "tr" and self.line and self.line[-1] == _CELL_END:
            self.line.pop()  # no separator after a row's last cell
        if tag in _BLOCKS:
            self.newline()
        elif tag in _CELLS:
            self.line.append(_CELL_END)

    # -- output ---------------------------------------------------------------

    def text(self, text: str) -> None:
        if self.pre:
            first, *rest = text.split("\n")
            self.line.append(first)
            for piece in rest:
                self.newline()
                self.line.append(piece)
        else:
            self.line.append(text)

    def newline(self) -> None:
        if self.line:
            self.page.lines.append(self.line)
            self.line = []

    def flush(self) -> None:
        self.newline()

    def next_number(self) -> int:
        self.number += 1
        return self.number

    # -- elements -------------------------------------------------------------

    def open_link(self, node: LexborNode) -> bool:
        url = _followable(self.base, node.attributes.get("href"))
        if url is None:
            return True
        number = self.next_number()
        self.page.links[number] = Link(number, "", url)
        self.line.append(f" [{number}] ")
        self.open_links.append((number, len(self.line), _node_key(node)))
        return True

    def close_link(self, node: LexborNode) -> None:
        number, start, _ = self.open_links.pop()
        # The link's words, read back from the line (fields and nested numbers included).
        words = " ".join("".join(p for p in self.line[start:] if isinstance(p, str)).split())
        if not words:
            attrs = node.attributes
            words = (attrs.get("aria-label") or attrs.get("title") or
                     urlsplit(self.page.links[number].url).path or "link").strip()
            self.line.append(words)
        self.page.links[number].text = words

    def image(self, node: LexborNode) -> bool:
        alt = " ".join((node.attributes.get("alt") or "").split())
        if alt:
            self.line.append(f" [image: {alt}] ")
        return False

    def line_break(self, node: LexborNode) -> bool:
        self.newline()
        return False

    def open_form(self, node: LexborNode) -> bool:
        attrs = node.attributes
        action = _join(self.base, attrs.get("action") or "") or self.page.url
        method = "POST" if (attrs.get("method") or "").strip().lower() == "post" else "GET"
        form = Form(action=action, method=method)
        self.page.forms.append(form)
        self.forms.append((_node_key(node), form))
        return True

    def current_form(self) -> Form:
        """The open form, or a form-less holder so fields outside forms still show."""
        if self.forms:
            return self.forms[-1][1]
        if self.loose is None:
            self.loose = Form(action=self.page.url, method="GET")
            self.page.forms.append(self.loose)
        return self.loose

    def add_button(self, label: str, node: LexborNode) -> None:
        attrs = node.attributes
        label = " ".join(label.split()) or "Submit"
        if not self.forms:
            self.line.append(f" (button: {label}) ")  # nothing to submit without JavaScript
            return
        form = self.forms[-1][1]
        action = form.action
        if attrs.get("formaction"):
            action = _join(self.base, attrs.get("formaction") or "") or action
        method = form.method
        if attrs.get("formmethod"):
            method = "POST" if (attrs.get("formmethod") or "").strip().lower() == "post" else "GET"
        number = self.next_number()
        self.page.buttons[number] = Button(number, label, form, action, method,
                                           attrs.get("name") or "", attrs.get("value") or "")
        self.line.append(f" [{number}] (button) {label} ")

    def button(self, node: LexborNode) -> bool:
        kind = (node.attributes.get("type") or "submit").strip().lower()
        label = node.text() or node.attributes.get("aria-label") or ""
        if kind == "submit":
            self.add_button(label, node)
        else:
            self.line.append(f" (button: {' '.join(label.split())}) ")
        return False

    def input(self, node: LexborNode) -> bool:
        attrs = node.attributes
        kind = (attrs.get("type") or "text").strip().lower()
        name = attrs.get("name") or ""
        value = attrs.get("value") or ""
        if kind in _SUBMIT_INPUTS:
            self.add_button(value or attrs.get("alt") or "Submit", node)
        elif kind == "hidden":
            self.current_form().fields.append(Field(name, "hidden", value))
        elif kind in ("radio", "checkbox"):
            self.choice(kind, name, value or "on", "checked" in attrs)
        elif kind in _TEXT_INPUTS:
            item = Field(name, "password" if kind == "password" else "text", value,
                         placeholder=" ".join((attrs.get("placeholder") or "").split()))
            self.current_form().fields.append(item)
            self.line.append(item)
        return False  # file, reset and button inputs do nothing a fetch can do

    def choice(self, kind: str, name: str, value: str, checked: bool) -> None:
        form = self.current_form()
        if kind == "checkbox":
            item = Field(name, "checkbox", value if checked else "", [(value, value)])
            form.fields.append(item)
            self.line.append(item)
            return
        key = (id(form), name)
        group = self.radios.get(key)
        if group is None:
            group = self.radios[key] = Field(name, "radio")
            form.fields.append(group)
            self.line.append(group)  # the group shows once, where its first button is
        group.options.append((value, value))
        if checked:
            group.value = value

    def select(self, node: LexborNode) -> bool:
        item = Field(node.attributes.get("name") or "", "select")
        selected = None
        for option in node.css("option"):
            attrs = option.attributes
            label = " ".join(option.text().split())
            value = attrs.get("value")
            item.options.append((label if value is None else value, label))
            if "selected" in attrs and selected is None:
                selected = item.options[-1][0]
        # HTML: with no selected option, a select sends its first option.
        item.value = selected if selected is not None else (item.options[0][0] if item.options else "")
        self.current_form().fields.append(item)
        self.line.append(item)
        return False

    def textarea(self, node: LexborNode) -> bool:
        item = Field(node.attributes.get("name") or "", "textarea", node.text())
        self.current_form().fields.append(item)
        self.line.append(item)
        return False

    def preformatted(self, node: LexborNode) -> bool:
        self.pre += 1
        return True


def _node_key(node: LexborNode) -> str:
    """Identity of a node across wrapper objects (selectolax makes a new one per access)."""
    return str(node.mem_id)


_ENTER = {
    "a": _Builder.open_link,
    "img": _Builder.image,
    "br": _Builder.line_break,
    "form": _Builder.open_form,
    "button": _Builder.button,
    "input": _Builder.input,
    "select": _Builder.select,
    "textarea": _Builder.textarea,
    "pre": _Builder.preformatted,
}

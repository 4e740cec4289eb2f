"""The web shop: HTML pages over a :class:`~agentgym.envs.web.catalog.Catalog`, a cart and orders.

:class:`ShopApp` is an app for :class:`~agentgym.envs.web.server.LoopbackServer`.
Its pages are plain HTML (no JavaScript), so any browser can use them:

=================  ======  ==================================================
path               method  page
=================  ======  ==================================================
``/``              GET     home: a search box and one link per product type
``/search``        GET     results for ``q``, ten a page (``page=2``...)
``/product/<id>``  GET     title, price, attributes, option selects,
                           "Add to cart" and "Buy now" buttons
``/cart``          GET     the cart, a "Remove" button per item, "Checkout"
``/cart/add``      POST    add the product with its options; redirects to ``/cart``
``/cart/remove``   POST    remove item ``index``; redirects to ``/cart``
``/buy``           POST    order the product at once; redirects to the order
``/checkout``      POST    order the cart; redirects to the order
``/order/<n>``     GET     the order's confirmation
=================  ======  ==================================================

Buying without choosing every option answers the product page again with
"Please choose a size" (status 400) and orders nothing. Every value read from
a request is checked; a bad one gets a 4xx page, never an exception.
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass
from urllib.parse import urlencode

from agentgym.envs.web.catalog import PRODUCT_TYPES, Catalog, Product
from agentgym.envs.web.server import Request, Response
from agentgym.parsing import read_int

__all__ = ["RESULTS_PER_PAGE", "Order", "OrderItem", "ShopApp", "money"]

RESULTS_PER_PAGE = 10
_MAX_QUERY_CHARS = 200
_SHOP = "AgentGym Shop"


def money(cents: int) -> str:
    """``2499`` -> ``"$24.99"``."""
    return f"${cents / 100:,.2f}"


@dataclass(frozen=True, slots=True)
class OrderItem:
    """A product with the options chosen for it."""

    product: Product
    options: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Order:
    number: int
    items: tuple[OrderItem, ...]


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


class ShopApp:
    """The shop's pages and state (cart, orders) for one catalogue at a time.

    Thread-safe: requests are served on handler threads while the env reads
    :attr:`orders`.
    """

    def __init__(self, catalog: Catalog | None = None) -> None:
        self._lock = threading.Lock()
        self.catalog = catalog or Catalog([])
        self.cart: list[OrderItem] = []
        self.orders: list[Order] = []

    def load(self, catalog: Catalog) -> None:
        """Show ``catalog``; empty the cart and forget the orders (a new episode)."""
        with self._lock:
            self.catalog = catalog
            self.cart = []
            self.orders = []

    def __call__(self, request: Request) -> Response:
        with self._lock:
            return self._route(request)

    def _route(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        method = "GET" if request.method == "HEAD" else request.method
        gets = {"/": self._home, "/search": self._search, "/cart": self._cart_page}
        posts = {"/cart/add": self._add, "/buy": self._buy, "/cart/remove": self._remove,
                 "/checkout": self._checkout}
        head, _, tail = path.rpartition("/")
        if method == "GET" and path in gets:
            return gets[path](request)
        if method == "GET" and head == "/product":
            return self._product_page(request, read_int(tail))
        if method == "GET" and head == "/order":
            return self._order_page(read_int(tail))
        if method == "POST" and path in posts:
            return posts[path](request)
        if path in posts or path in gets:
            return self._page("Not allowed", "<p>Use the buttons on the shop's pages.</p>", 405)
        return self._page("Not found", "<p>There is no such page in this shop.</p>", 404)

    # -- layout ---------------------------------------------------------------

    def _page(self, title: str, body: str, status: int = 200, query: str = "") -> Response:
        count = len(self.cart)
        document = (
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)} | {_SHOP}"
            f"</title></head><body><nav><a href='/'>Home</a> <a href='/cart'>Cart ({count})</a>"
            f"</nav><form action='/search' method='get'><input type='search' name='q' "
            f"value='{_e(query)}' placeholder='Search products'> <button type='submit'>Search"
            f"</button></form><main>{body}</main></body></html>"
        )
        return Response(document, status)

    def _home(self, request: Request) -> Response:
        kinds = " ".join(f"<li><a href='/search?{urlencode({'q': kind.name})}'>{_e(kind.name)}</a></li>"
                         for kind in PRODUCT_TYPES)
        body = (f"<h1>Welcome to the {_SHOP}</h1><p>{len(self.catalog.products)} products. "
                f"Search for what you need, or browse:</p><ul>{kinds}</ul>")
        return self._page("Home", body)

    # -- browsing -------------------------------------------------------------

    def _search(self, request: Request) -> Response:
        query = request.query.get("q", "")[:_MAX_QUERY_CHARS]
        results = self.catalog.search(query)
        pages = max(1, -(-len(results) // RESULTS_PER_PAGE))
        page = min(max(read_int(request.query.get("page", "1")[:20]) or 1, 1), pages)
        first = (page - 1) * RESULTS_PER_PAGE
        shown = results[first:first + RESULTS_PER_PAGE]
        if not shown:
            body = (f"<h1>No results for &quot;{_e(query)}&quot;</h1>"
                    "<p>Try other words, or fewer of them.</p>")
            return self._page(f"No results for {query!r}", body, query=query)
        items = "".join(
            f"<li><a href='/product/{p.id}?{urlencode({'q': query, 'page': page})}'>{_e(p.title)}</a>"
            f" &middot; {money(p.price)} &middot; rated {p.rating}</li>" for p in shown)
        moves = []
        if page > 1:
            moves.append(f"<a href='/search?{urlencode({'q': query, 'page': page - 1})}'>&lt; Previous page</a>")
        if page < pages:
            moves.append(f"<a href='/search?{urlencode({'q': query, 'page': page + 1})}'>Next page &gt;</a>")
        body = (f"<h1>Results for &quot;{_e(query)}&quot;</h1><p>Showing {first + 1}-"
                f"{first + len(shown)} of {len(results)} (page {page} of {pages})</p>"
                f"<ol>{items}</ol><p>{' '.join(moves)}</p>")
        return self._page(f"Results for {query!r}", body, query=query)

    def _product_page(self, request: Request, product_id: int | None,
                      error: str = "", chosen: dict[str, str] | None = None) -> Response:
        product = self.catalog.get(product_id) if product_id is not None else None
        if product is None:
            return self._page("Not found", "<p>There is no such product.</p>", 404)
        chosen = chosen or {}
        selects = "".join(self._select(name, values, chosen.get(name, ""))
                          for name, values in product.options)
        query = request.query.get("q", request.form.get("q", ""))[:_MAX_QUERY_CHARS]
        page = read_int(request.query.get("page", request.form.get("page", "1"))[:20]) or 1
        back = (f"<p><a href='/search?{urlencode({'q': query, 'page': page})}'>Back to results</a></p>"
                if query else "")
        warning = f"<p><strong>{_e(error)}</strong></p>" if error else ""
        body = (
            f"<h1>{_e(product.title)}</h1>{warning}<p>Price: {money(product.price)}</p>"
            f"<p>Rating: {product.rating} out of 5</p><ul><li>Brand: {_e(product.brand)}</li>"
            f"<li>Type: {_e(product.type)}</li><li>Material: {_e(product.material)}</li>"
            f"<li>Features: {_e(', '.join(product.features) or 'none')}</li></ul>"
            f"<form method='post' action='/cart/add'><input type='hidden' name='pid' "
            f"value='{product.id}'><input type='hidden' name='q' value='{_e(query)}'>{selects}"
            f"<p><button type='submit'>Add to cart</button> <button type='submit' "
            f"formaction='/buy'>Buy now</button></p></form>"
            f"<p>{_e(_description(product))}</p>{back}"
        )
        return self._page(product.title, body, 400 if error else 200, query=query)

    @staticmethod
    def _select(name: str, values: tuple[str, ...], chosen: str) -> str:
        options = "".join(f"<option value='{_e(v)}'{' selected' if v == chosen else ''}>{_e(v)}</option>"
                          for v in values)
        return (f"<p><label>{_e(name.capitalize())}: <select name='{_e(name)}'><option value=''>"
                f"choose a {_e(name)}</option>{options}</select></label></p>")

    # -- cart and orders ------------------------------------------------------

    def _item_from(self, request: Request) -> tuple[OrderItem | None, Response | None]:
        """The product and options a form asks for, or the page that says what is missing."""
        product_id = read_int(request.form.get("pid", "")[:20])
        product = self.catalog.get(product_id) if product_id is not None else None
        if product is None:
            return None, self._page("Not found", "<p>There is no such product.</p>", 404)
        chosen = {name: request.form.get(name, "") for name, _ in product.options}
        for name, values in product.options:
            if not chosen[name]:
                return None, self._product_page(request, product.id, f"Please choose a {name}.", chosen)
            if chosen[name] not in values:
                return None, self._product_page(
                    request, product.id, f"{chosen[name][:40]!r} is not a {name} of this product.", chosen)
        return OrderItem(product, tuple(chosen.items())), None

    def _add(self, request: Request) -> Response:
        item, problem = self._item_from(request)
        if item is None:
            return problem  # type: ignore[return-value]
        self.cart.append(item)
        return Response(status=303, location="/cart")

    def _remove(self, request: Request) -> Response:
        index = read_int(request.form.get("index", "")[:20])
        if index is not None and 0 <= index < len(self.cart):
            del self.cart[index]
        return Response(status=303, location="/cart")

    def _buy(self, request: Request) -> Response:
        item, problem = self._item_from(request)
        if item is None:
            return problem  # type: ignore[return-value]
        return self._place((item,))

    def _checkout(self, request: Request) -> Response:
        if not self.cart:
            return self._cart_page(request, "Your cart is empty: add something first.")
        items, self.cart = tuple(self.cart), []
        return self._place(items)

    def _place(self, items: tuple[OrderItem, ...]) -> Response:
        order = Order(len(self.orders) + 1, items)
        self.orders.append(order)
        return Response(status=303, location=f"/order/{order.number}")

    def _cart_page(self, request: Request, message: str = "") -> Response:
        rows = "".join(
            f"<li>{_e(item.product.title)} ({_e(_options_text(item))}) &middot; "
            f"{money(item.product.price)} <form method='post' action='/cart/remove'><input "
            f"type='hidden' name='index' value='{index}'><button type='submit'>Remove</button>"
            f"</form></li>" for index, item in enumerate(self.cart))
        total = sum(item.product.price for item in self.cart)
        note = f"<p><strong>{_e(message)}</strong></p>" if message else ""
        if self.cart:
            body = (f"<h1>Your cart</h1>{note}<ul>{rows}</ul><p>Total: {money(total)}</p>"
                    "<form method='post' action='/checkout'><button type='submit'>Checkout</button></form>")
        else:
            body = f"<h1>Your cart</h1>{note}<p>Your cart is empty.</p>"
        return self._page("Cart", body, 400 if message else 200)

    def _order_page(self, number: int | None) -> Response:
        if number is None or not 1 <= number <= len(self.orders):
            return self._page("Not found", "<p>There is no such order.</p>", 404)
        order = self.orders[number - 1]
        rows = "".join(f"<li>{_e(item.product.title)} ({_e(_options_text(item))}) &middot; "
                       f"{money(item.product.price)}</li>" for item in order.items)
        body = f"<h1>Thank you! Order {order.number} is placed.</h1><ul>{rows}</ul>"
        return self._page(f"Order {order.number}", body)


def _options_text(item: OrderItem) -> str:
    return ", ".join(f"{name} {value}" for name, value in item.options) or "no options"


def _description(product: Product) -> str:
    features = ", ".join(product.features) if product.features else "no special features"
    return (f"A {product.material} {product.type} by {product.brand}: {features}. "
            f"Comes in {', '.join(f'{len(values)} {name} choices' for name, values in product.options)}.")

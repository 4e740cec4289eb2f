"""The catalogue, goals, WebShop's reward, and the shop's pages (called directly, no server)."""

from __future__ import annotations

import numpy as np
import pytest

from agentgym.envs.web.catalog import Goal, Product, generate_task, score_purchase
from agentgym.envs.web.page import parse_page
from agentgym.envs.web.server import Request
from agentgym.envs.web.shop import RESULTS_PER_PAGE, ShopApp

URL = "http://127.0.0.1:1"


def product(**changes: object) -> Product:
    fields: dict[str, object] = {
        "id": 0, "type": "t-shirt", "brand": "Quill", "material": "cotton",
        "features": ("slim fit", "organic"), "options": (("colour", ("red", "blue")), ("size", ("S", "M"))),
        "price": 2499, "rating": 4.0}
    fields.update(changes)
    return Product(**fields)  # type: ignore[arg-type]


GOAL = Goal("t-shirt", ("cotton", "slim fit"), (("colour", "red"), ("size", "M")), 3000, "...", 0)


@pytest.mark.parametrize(("bought", "chosen", "reward"), [
    (product(), {"colour": "red", "size": "M"}, 1.0),
    (product(), {"colour": "blue", "size": "M"}, 4 / 5),
    (product(material="linen"), {"colour": "red", "size": "M"}, 4 / 5),
    (product(features=()), {"colour": "red", "size": "S"}, 3 / 5),
    (product(price=3001), {"colour": "red", "size": "M"}, 4 / 5),
    (product(price=3000), {"colour": "red", "size": "M"}, 1.0),  # "at most" includes the limit
    (product(type="hoodie"), {"colour": "red", "size": "M"}, 0.5),  # same category
    (product(type="coffee mug"), {"colour": "red", "size": "M"}, 0.1),
])
def test_webshop_reward(bought: Product, chosen: dict[str, str], reward: float) -> None:
    assert score_purchase(GOAL, bought, chosen).total == pytest.approx(reward)


@pytest.mark.parametrize("seed", range(40))
def test_every_goal_is_met_by_its_product_and_missed_by_its_near_misses(seed: int) -> None:
    catalog, goal = generate_task(np.random.default_rng(seed), 100)
    assert len(catalog.products) == 100
    assert [p.id for p in catalog.products] == list(range(100))
    target = catalog.products[goal.target]
    assert score_purchase(goal, target, dict(goal.options)).total == 1.0
    assert goal.target in [p.id for p in catalog.search(goal.query)[:RESULTS_PER_PAGE]]
    assert f"${goal.max_price / 100:.2f}" in goal.text
    for name, value in goal.options:
        assert value in goal.text and target.offers(name, value)
    # Near misses: the target over budget, and (when the goal names them) another
    # material, a feature missing, the first option not offered.
    twins = [p for p in catalog.products if p.id != target.id and p.type == target.type
             and (p.material, p.features, p.options) == (target.material, target.features, target.options)]
    assert any(p.price > goal.max_price for p in twins)
    misses = [p for p in catalog.products if p.type == target.type and p.id != target.id
              and score_purchase(goal, p, dict(goal.options)).total < 1.0]
    assert len(misses) >= 2


def test_same_seed_same_catalogue_and_goal() -> None:
    first = generate_task(np.random.default_rng(7), 50)
    second = generate_task(np.random.default_rng(7), 50)
    assert first[1] == second[1]
    assert first[0].products == second[0].products
    assert generate_task(np.random.default_rng(8), 50)[1] != first[1]


def test_search_ranks_by_shared_words() -> None:
    catalog, goal = generate_task(np.random.default_rng(0), 60)
    results = catalog.search(goal.query)
    assert results and len(results) <= 60
    assert catalog.search("") == catalog.products
    assert catalog.search("zzzz qqqq") == []


def app_with_task(seed: int = 0) -> tuple[ShopApp, Goal]:
    catalog, goal = generate_task(np.random.default_rng(seed), 40)
    app = ShopApp()
    app.load(catalog)
    return app, goal


def page_of(app: ShopApp, method: str, path: str, query: dict | None = None,
            form: dict | None = None) -> tuple[int, str]:
    response = app(Request(method, path, query or {}, form or {}))
    return response.status, parse_page(response.body, URL + path).view() if response.body else ""


def test_buying_needs_every_option_and_records_the_order() -> None:
    app, goal = app_with_task()
    form = {"pid": str(goal.target), "colour": dict(goal.options).get("colour", "")}
    status, text = page_of(app, "POST", "/buy", form=form)
    missing = next(name for name, _ in goal.options if not form.get(name))
    assert status == 400 and f"Please choose a {missing}." in text
    assert app.orders == []
    form.update(goal.options)
    response = app(Request("POST", "/buy", {}, form))
    assert (response.status, response.location) == (303, "/order/1")
    assert len(app.orders) == 1
    assert dict(app.orders[0].items[0].options) == dict(goal.options)
    assert "Thank you! Order 1 is placed." in page_of(app, "GET", "/order/1")[1]


def test_cart_add_remove_checkout() -> None:
    app, goal = app_with_task()
    form = {"pid": str(goal.target), **dict(goal.options)}
    for _ in range(2):
        assert app(Request("POST", "/cart/add", {}, form)).location == "/cart"
    status, text = page_of(app, "GET", "/cart")
    assert "Cart (2)" in text and text.count("(button) Remove") == 2
    app(Request("POST", "/cart/remove", {}, {"index": "0"}))
    assert len(app.cart) == 1
    assert app(Request("POST", "/checkout")).location == "/order/1"
    assert app.cart == [] and len(app.orders[0].items) == 1
    status, text = page_of(app, "POST", "/checkout")
    assert status == 400 and "Your cart is empty: add something first." in text


@pytest.mark.parametrize(("method", "path", "query", "form", "status"), [
    ("GET", "/product/99999", {}, {}, 404),
    ("GET", "/product/-1", {}, {}, 404),
    ("GET", "/product/abc", {}, {}, 404),
    ("GET", "/order/1", {}, {}, 404),
    ("GET", "/nowhere", {}, {}, 404),
    ("GET", "/buy", {}, {}, 405),
    ("POST", "/", {}, {}, 405),
    ("POST", "/buy", {}, {"pid": "1" * 5000}, 404),
    ("POST", "/buy", {}, {"pid": "0", "colour": "not a colour", "size": "x", "capacity": "x",
                          "model": "x"}, 400),
    ("POST", "/cart/remove", {}, {"index": "-5"}, 303),
    ("GET", "/search", {"q": "x" * 10_000, "page": "999999999999999999999"}, {}, 200),
    ("GET", "/search", {"q": "shirt", "page": "-3"}, {}, 200),
    ("HEAD", "/", {}, {}, 200),
])
def test_bad_requests_get_pages_not_exceptions(method: str, path: str, query: dict, form: dict,
                                               status: int) -> None:
    app, _ = app_with_task()
    assert app(Request(method, path, query, form)).status == status
    assert app.orders == []


def test_results_paginate() -> None:
    app, _ = app_with_task()
    first = page_of(app, "GET", "/search", {"q": ""})[1]
    assert "Showing 1-10 of 40 (page 1 of 4)" in first and "Next page >" in first
    last = page_of(app, "GET", "/search", {"q": "", "page": "4"})[1]
    assert "Showing 31-40 of 40 (page 4 of 4)" in last and "< Previous page" in last
    assert "Next page" not in last

"""WebShop-LLM-v0: follow a shopper's instruction in a web shop the env serves itself.

Each episode draws a catalogue and an instruction from the seed ("I need a
t-shirt that is cotton and machine washable, in red, in size M, for at most
$30.00"). The shop (:mod:`agentgym.envs.web.shop`) runs on an HTTP server on
127.0.0.1; the agent drives a text browser (:class:`~agentgym.envs.web.browser.Browser`)
and reads each page as text with numbered links and buttons. Actions, one a
turn, bare or inside ``<answer>...</answer>``::

    search[red cotton t-shirt]   click[3]   select[M]   back   buy

Buying ends the episode with WebShop's reward (type x share of attributes,
options and price limit met; see :mod:`agentgym.envs.web.catalog`); success
means a reward of 1. Anything else that cannot be done on the page is
feedback with ``info["action_valid"] = False``.

Server lifetime: one server per env instance (one listening socket and one
thread, started by the first ``reset`` and reused by later episodes), so envs
running side by side in the rollout manager's threads share nothing. It stops
on ``close()``, when the env is garbage collected, or at interpreter exit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.envs.web.browser import Browser, parse_command
from agentgym.envs.web.catalog import Goal, generate_task, score_purchase, tokens
from agentgym.envs.web.server import LoopbackServer
from agentgym.envs.web.shop import Order, ShopApp, money
from agentgym.errors import ConfigError, ToolInputError
from agentgym.parsing import extract_answer

__all__ = ["ACTIONS", "MAX_QUERY_CHARS", "WebShopEnv"]

#: The action names the agent may use.
ACTIONS = ("search", "click", "select", "back", "buy")
#: Longest search an agent may type.
MAX_QUERY_CHARS = 200
_BUY_BUTTONS = ("Buy now", "Checkout")


class WebShopEnv(TextEnv):
    """Shop for the product an instruction describes, in a served web shop.

    Args:
        num_products: products in each episode's catalogue (near misses of the
            goal included), at least 10.
        max_turns: turn limit; not buying by then scores 0.
        max_page_chars: longest page text shown (longer pages are cut).
        backend: the browser's fetcher: ``"http"`` (default) or ``"chromium"``
            (headless Chromium; needs ``playwright`` and Debian's ``chromium``).
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    action_format = "<answer>click[3]</answer>"

    def __init__(
        self,
        *,
        num_products: int = 200,
        max_turns: int = 20,
        max_page_chars: int = 6000,
        backend: str = "http",
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode)
        check_number("num_products", num_products, minimum=10, maximum=100_000)
        check_number("max_page_chars", max_page_chars, minimum=200)
        if backend not in ("http", "chromium"):
            raise ConfigError(f"backend must be 'http' or 'chromium', got {backend!r}.")
        self.num_products = num_products
        self.max_page_chars = max_page_chars
        self.backend = backend
        self.goal: Goal | None = None
        self.app = ShopApp()
        self.server: LoopbackServer | None = None
        self.browser: Browser | None = None

    # -- the shop's lifetime ----------------------------------------------------

    def _start(self) -> tuple[LoopbackServer, Browser]:
        """Start the server and browser on first use (or again after ``close``)."""
        if self.server is None or not self.server.running:
            self.server = LoopbackServer(self.app)
        if self.browser is None:
            self.browser = Browser(backend=self.backend, allowed_hosts={"127.0.0.1"})
        return self.server, self.browser

    def close(self) -> None:
        """Stop the server and close the browser. The env restarts them on the next reset."""
        if self.browser is not None:
            self.browser.close()
            self.browser = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        self._episode_over = True  # its pages are gone: step() needs a reset first
        super().close()

    # -- the game ------------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        if options:
            raise ConfigError(f"Unknown reset options {sorted(options)}; WebShop takes none.")
        catalog, self.goal = generate_task(self.np_random, self.num_products)
        server, browser = self._start()
        self.app.load(catalog)
        browser.clear()
        browser.open(f"{server.url}/")
        return f"Instruction: {self.goal.text}\n\n{self._view()}"

    def _reset_info(self) -> dict[str, Any]:
        return {"instruction": self.goal.text if self.goal else ""}

    def _play(self, action: str) -> Outcome:
        answer = extract_answer(action)
        command = parse_command(action if answer is None else answer)
        if command is None or command[0] not in ACTIONS:
            return self._invalid("write one action: search[words], click[N], select[option], "
                                 "back or buy (alone, or inside <answer></answer>).")
        name, argument = command
        if name in ("search", "click", "select") and not argument:
            return self._invalid(f"{name}[...] needs something inside the brackets.")
        if name == "search" and len(argument) > MAX_QUERY_CHARS:
            return self._invalid(f"keep searches under {MAX_QUERY_CHARS} characters.")
        orders_before = len(self.app.orders)
        _, browser = self._start()
        try:
            if name == "buy":
                browser.press(*_BUY_BUTTONS)
            elif name == "back":
                browser.back()
            else:
                getattr(browser, name)(argument)
        except ToolInputError as error:
            return self._invalid(str(error))
        if len(self.app.orders) > orders_before:
            return self._purchase(self.app.orders[-1])
        return Outcome(self._view())

    def _purchase(self, order: Order) -> Outcome:
        assert self.goal is not None  # set by reset, which step requires
        items = []
        for item in order.items:
            score = score_purchase(self.goal, item.product, dict(item.options))
            items.append({"product": item.product.id, "title": item.product.title,
                          "options": dict(item.options), "price": money(item.product.price),
                          "reward": score.total, "type_factor": score.type_factor,
                          "attributes": score.attributes, "options_matched": score.options,
                          "price_ok": score.price})
        reward = sum(item["reward"] for item in items) / len(items)
        success = reward == 1.0
        verdict = ("It is exactly what was asked for." if success else
                   "It does not fully match the instruction.")
        return Outcome(f"{self._view()}\n\nYou bought it. {verdict} Reward: {reward:.3f}.",
                       reward=reward, terminated=True, success=success, info={"purchase": items})

    def _invalid(self, why: str) -> Outcome:
        return Outcome(f"Invalid action: {why}\n\n{self._view()}", action_valid=False)

    def _view(self) -> str:
        return self.browser.view(max_chars=self.max_page_chars) if self.browser else "(no page)"

    def render_text(self) -> str:
        instruction = self.goal.text if self.goal else "(no episode yet)"
        return f"Instruction: {instruction}\n\n{self._view()}"

    def _describe(self) -> str:
        return (
            "You are shopping in a web shop for someone. Their instruction names a type of "
            "product, attributes (material, features), options (such as colour and size) and a "
            "price limit. Find a product that meets all of them, choose its options and buy it.\n"
            "Each turn you see the current page as text: links and buttons carry numbers [N]; "
            "option fields are shown as [select NAME: A | B | C; chosen: ...].\n"
            "Write exactly one action per turn, either alone or inside answer tags, e.g. "
            "<answer>search[red cotton t-shirt]</answer>:\n"
            "  search[words]   search the shop (every page has the search box)\n"
            "  click[N]        follow link N or press button N (its words work too: click[Next page >])\n"
            "  select[option]  choose an option on a product page, e.g. select[M] "
            "(select[size=M] if two fields offer M)\n"
            "  back            return to the previous page\n"
            "  buy             buy the product on this page with the options you chose "
            "(on the cart page: check out)\n"
            "Buying ends the episode. The reward, as in WebShop, is the share of the instruction's "
            "attributes, options and price limit that the purchase meets, times 1 for the right "
            "type of product (0.5 for another type of the same category, 0.1 otherwise); 1 is a "
            "perfect purchase. Not buying within the turn limit scores 0."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        """A well-formed action that fits the page: mostly clicks, some selects and searches."""
        page = self.browser.page if self.browser else None
        numbers = sorted([*page.links, *page.buttons]) if page else []
        options = [f"{item.name}={label}" for item in page.fields() if item.kind == "select"
                   for value, label in item.options if value] if page else []
        draw = float(rng.random())
        if draw < 0.5 and numbers:
            move = f"click[{numbers[int(rng.integers(len(numbers)))]}]"
        elif draw < 0.7 and options:
            move = f"select[{options[int(rng.integers(len(options)))]}]"
        elif draw < 0.85:
            words = sorted(tokens(self.goal.text)) if self.goal else ["shirt"]
            picked = rng.choice(len(words), size=min(3, len(words)), replace=False)
            move = f"search[{' '.join(words[int(i)] for i in sorted(picked))}]"
        elif draw < 0.95:
            move = "back"
        else:
            move = "buy"
        return self.format_action(move)

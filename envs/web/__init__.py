"""Web environments: a shop the env serves itself on 127.0.0.1, and a text browser for agents.

- :mod:`~agentgym.envs.web.env`: ``WebShop-LLM-v0`` (:class:`WebShopEnv`).
- :mod:`~agentgym.envs.web.browser`: :class:`Browser` and the ``browser`` tool (:class:`BrowserTool`).
- :mod:`~agentgym.envs.web.page`: HTML to the text view (selectolax, never raises on markup).
- :mod:`~agentgym.envs.web.server`: :class:`LoopbackServer`, an HTTP server on 127.0.0.1.
- :mod:`~agentgym.envs.web.shop` and :mod:`~agentgym.envs.web.catalog`: the shop's pages,
  products, goals and WebShop's reward.
- :mod:`~agentgym.envs.web.chromium`: the optional headless-Chromium fetcher (JavaScript).

Needs the ``web`` extra (``scripts/setup.sh web``: selectolax); the Chromium
backend needs ``playwright`` and Debian's ``chromium`` as well.
"""

from __future__ import annotations

from agentgym.envs.web.browser import Browser, BrowserTool, HttpFetcher
from agentgym.envs.web.env import WebShopEnv
from agentgym.envs.web.page import Page, parse_page
from agentgym.envs.web.server import LoopbackServer, Request, Response

__all__ = [
    "Browser",
    "BrowserTool",
    "HttpFetcher",
    "LoopbackServer",
    "Page",
    "Request",
    "Response",
    "WebShopEnv",
    "parse_page",
]

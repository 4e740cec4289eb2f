"""A scripted shopper for WebShop-LLM-v0: reads the pages as text and follows the instruction.

It searches for the instruction's words, opens results whose listed price is
within the budget, reads each product page (type, material, features, option
fields), goes back when something is missing, and on the first product that
meets everything selects the options and buys. It knows the goal as a
structure (what the instruction says) but learns the shop only from the
observations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentgym.envs.web.env import WebShopEnv

__all__ = ["Episode", "shop"]

_RESULT = re.compile(r"^\[(\d+)\] (.+?) · \$([\d,]+\.\d\d) · rated")
_NEXT = re.compile(r"\[(\d+)\] Next page >")
_SELECT = re.compile(r"\[select (\S+): ([^;]*); chosen")


@dataclass
class Episode:
    reward: float = 0.0
    success: bool = False
    turns: int = 0
    observations: list[str] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)
    done: bool = False


def _field(observation: str, name: str) -> str:
    for line in observation.splitlines():
        if line.startswith(f"{name}: "):
            return line[len(name) + 2:]
    return ""


def _fits(observation: str, env: WebShopEnv) -> bool:
    goal = env.goal
    assert goal is not None
    if _field(observation, "Type") != goal.type:
        return False
    attributes = {_field(observation, "Material"), *_field(observation, "Features").split(", ")}
    if not set(goal.attributes) <= attributes:
        return False
    offered = {name: values.split(" | ") for name, values in _SELECT.findall(observation)}
    return all(value in offered.get(name, []) for name, value in goal.options)


def shop(env: WebShopEnv, seed: int, *, wrap: bool = True) -> Episode:
    """Play one episode; ``wrap`` writes actions inside ``<answer>`` tags."""
    episode = Episode()
    env.reset(seed=seed)
    goal = env.goal
    assert goal is not None

    def act(action: str) -> str:
        text = f"<answer>{action}</answer>" if wrap else action
        observation, reward, terminated, truncated, info = env.step(text)
        assert info["action_valid"], (action, observation)
        episode.turns += 1
        episode.observations.append(observation)
        episode.infos.append(info)
        episode.reward, episode.success = float(reward), info["success"]
        episode.done = terminated or truncated
        return observation

    results = act(f"search[{goal.query}]")
    while not episode.done:
        for line in results.splitlines():
            match = _RESULT.match(line)
            if match is None or episode.done:
                continue
            number, price = match.group(1), float(match.group(3).replace(",", "")) * 100
            if price > goal.max_price or goal.type.title() not in match.group(2):
                continue
            product = act(f"click[{number}]")
            if _fits(product, env):
                for name, value in goal.options:
                    act(f"select[{name}={value}]")
                act("buy")
                return episode
            if not episode.done:
                results = act("back")
        following = _NEXT.search(results)
        if following is None or episode.done:
            return episode
        results = act(f"click[{following.group(1)}]")
    return episode

"""Which env has an expert policy (``--policy solver``), and how to get it.

The experts live beside their games (``agentgym.envs.games.experts``); this
registry names them by string, so the rollout core imports no env family
until an expert is asked for.

    policy = expert_policy("Sokoban-LLM-v0")     # a SokobanExpert
    expert_policy("Wordle-LLM-v0")               # ConfigError: no expert; lists the envs that have one
"""

from __future__ import annotations

import importlib
from typing import Any

from agentgym.errors import ConfigError
from agentgym.registry import env_info

__all__ = ["EXPERTS", "expert_policy", "has_expert"]

_GAMES = "agentgym.envs.games.experts"

#: env id -> "module:class" of its expert policy
EXPERTS: dict[str, str] = {
    "Sokoban-LLM-v0": f"{_GAMES}:SokobanExpert",
    "FrozenLake-LLM-v0": f"{_GAMES}:FrozenLakeExpert",
    "Bandit-LLM-v0": f"{_GAMES}:BanditExpert",
    "GuessNumber-LLM-v0": f"{_GAMES}:GuessNumberExpert",
}


def has_expert(env_id: str) -> bool:
    return env_id in EXPERTS


def expert_policy(env_id: str) -> Any:
    """A new expert policy for ``env_id``; :class:`ConfigError` when it has none."""
    env_info(env_id)  # an unknown id gets the registry's "did you mean"
    entry = EXPERTS.get(env_id)
    if entry is None:
        raise ConfigError(
            f"{env_id} has no expert policy (--policy solver); envs with one: "
            f"{', '.join(sorted(EXPERTS))}. Use --policy random or a model for {env_id}."
        )
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)()

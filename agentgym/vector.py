"""Vectorised text envs.

Gymnasium's ``AsyncVectorEnv`` defaults to shared memory, which for ``Text``
spaces silently returns ``"000..."`` instead of the real observations
(Gymnasium 1.4). :func:`make_vec` therefore never uses shared memory, and
refuses it when asked. Observations come back as a tuple of ``str``.
Gymnasium's default autoreset mode applies: after an episode ends, the next
``step`` call resets that sub-env (its action is ignored).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

from agentgym.core import check_number
from agentgym.errors import ConfigError
from agentgym.registry import env_info, make

__all__ = ["make_vec"]


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    asynchronous: bool = False,
    shared_memory: bool = False,
    **env_kwargs: Any,
) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id`` in one vector env.

    >>> envs = make_vec("Bandit-LLM-v0", 2)
    >>> observations, infos = envs.reset(seed=0)
    >>> type(observations), type(observations[0])
    (<class 'tuple'>, <class 'str'>)

    Args:
        asynchronous: one subprocess per env (``AsyncVectorEnv``) rather than
            a loop in this process (``SyncVectorEnv``). Text envs are fast, so
            the loop is usually quicker; use subprocesses for slow envs.
        shared_memory: must stay False; text cannot travel through shared memory.
        env_kwargs: passed to every env's constructor.
    """
    check_number("num_envs", num_envs, minimum=1)
    if shared_memory:
        raise ConfigError(
            "shared_memory=True corrupts text observations in Gymnasium's AsyncVectorEnv "
            "(they come back as '000...'); leave it False."
        )
    env_info(env_id)  # a misspelt id fails here with "did you mean"
    env_fns = [functools.partial(make, env_id, **env_kwargs) for _ in range(num_envs)]
    if asynchronous:
        return AsyncVectorEnv(env_fns, shared_memory=False)
    return SyncVectorEnv(env_fns)

"""What agentgym's OpenEnv server and its ``openenv:`` client agree on, with no OpenEnv import.

An OpenEnv environment is typed: its ``/schema`` route gives the JSON schemas of its
action and observation. agentgym's server uses the models below (in
:mod:`agentgym.interop.openenv_server`); the client (``agentgym.envs.external``) reads
any server, and where it finds these fields it uses them as agentgym does:

- action ``{"text": str}``: the agent's whole message;
- observation ``text`` (what the agent reads), ``instructions`` (the system prompt, on
  reset), ``info`` (the Gymnasium ``info`` dict), ``terminated`` / ``truncated``
  (Gymnasium's two ends; OpenEnv's ``done`` is their *or*), besides OpenEnv's
  ``reward`` and ``done``.

``info`` travels as JSON: :func:`jsonable` makes any ``info`` JSON-safe, once, on the
server, so both ends compare equal after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["ACTION_FIELD", "INFO_FIELD", "INSTRUCTIONS_FIELD", "OBSERVATION_FIELD",
           "TERMINATED_FIELD", "TRUNCATED_FIELD", "jsonable"]

ACTION_FIELD = "text"
OBSERVATION_FIELD = "text"
INSTRUCTIONS_FIELD = "instructions"
INFO_FIELD = "info"
TERMINATED_FIELD = "terminated"
TRUNCATED_FIELD = "truncated"


def jsonable(value: Any) -> Any:
    """``value`` as JSON can carry it: mappings with str keys, lists for tuples and arrays,
    numbers for NumPy scalars, None for NaN and infinities, ``str()`` for anything else.

    >>> import numpy as np
    >>> jsonable({"cell": (1, 2), 3: np.int64(4), "x": float("nan")})
    {'cell': [1, 2], '3': 4, 'x': None}
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    item = getattr(value, "item", None)  # a NumPy scalar
    if callable(item) and getattr(value, "shape", None) == ():
        return jsonable(item())
    tolist = getattr(value, "tolist", None)  # a NumPy array
    if callable(tolist):
        return jsonable(tolist())
    return str(value)

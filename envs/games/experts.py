"""Expert (scripted) policies for the games: optimal play read off the env's own state.

They give demonstrations to learn from (``agentgym rollout --policy solver``)
and an upper row for result tables. Each expert is a policy in the rollout
manager's sense: ``act(observation, env) -> action text``, where ``env`` is
the unwrapped game. They look at the game's state rather than parse the
observation, so they never misread it; a model has only the text.

One move per turn: an expert re-plans from the current state every turn
(closed loop), so a demonstration turn is always "this grid -> this move",
the shape a model can learn turn by turn.

- Sokoban: breadth-first search over (player, boxes): a shortest solution.
- FrozenLake: breadth-first search around the holes (on slippery ice, the
  first move of a shortest path: good, not optimal).
- Bandit: the arm with the best expected payout (the observation states the odds).
- GuessNumber: binary search on the hints given so far.

    expert = SokobanExpert()
    action = expert.act(observation, env.unwrapped)   # '<answer>Left</answer>'
"""

from __future__ import annotations

from collections import deque
from typing import Any

from agentgym.errors import PolicyError

__all__ = ["BanditExpert", "FrozenLakeExpert", "GuessNumberExpert", "SokobanExpert", "solve_sokoban"]

#: Sokoban moves in the order the search tries them (ties go to the earlier one).
_SOKOBAN_MOVES = ("Up", "Down", "Left", "Right")
_SOKOBAN_STATE_LIMIT = 2_000_000


def solve_sokoban(level: Any, *, limit: int = _SOKOBAN_STATE_LIMIT) -> list[str] | None:
    """A shortest list of moves (``"Up"``, ...) that puts every box on a target; None if none.

    ``level`` is a :class:`~agentgym.envs.games.sokoban.Level`. Breadth-first
    over (player cell, box cells); a box pushed into a dead corner (not a
    target, walls on two sides at a right angle) is pruned, which keeps the
    search small without losing a solution. ``limit`` caps the states visited
    (None past it).
    """
    width, walls, targets = level.width, level.walls, level.targets
    offsets = {"Up": -width, "Down": width, "Left": -1, "Right": 1}
    dead = _dead_corners(level)
    start = (level.player, frozenset(level.boxes))
    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        if boxes <= targets:
            return _moves_to(parent, state)
        for name in _SOKOBAN_MOVES:
            step = offsets[name]
            ahead = player + step
            if ahead in walls:
                continue
            moved = boxes
            if ahead in boxes:
                beyond = ahead + step
                if beyond in walls or beyond in boxes or beyond in dead:
                    continue
                moved = (boxes - {ahead}) | {beyond}
            following = (ahead, moved)
            if following in parent:
                continue
            if len(parent) >= limit:
                return None
            parent[following] = (state, name)
            queue.append(following)
    return None


def _dead_corners(level: Any) -> frozenset[int]:
    """Floor cells (not targets) with a wall above or below and one left or right:
    a box there can never move again, so the level could not be solved."""
    width, walls = level.width, level.walls
    dead = set()
    for cell in range(level.width * level.height):
        if cell in walls or cell in level.targets:
            continue
        vertical = cell - width in walls or cell + width in walls
        horizontal = cell - 1 in walls or cell + 1 in walls
        if vertical and horizontal:
            dead.add(cell)
    return frozenset(dead)


def _moves_to(parent: dict[Any, Any], state: Any) -> list[str]:
    moves = []
    while parent[state] is not None:
        state, move = parent[state]
        moves.append(move)
    return moves[::-1]


class SokobanExpert:
    """Plays the first move of a shortest solution from the current position, one move a turn."""

    def act(self, observation: str, env: Any) -> str:
        level = getattr(env, "level", None)
        if level is None:
            raise PolicyError("SokobanExpert needs a SokobanEnv after reset() (env.level is unset).")
        moves = solve_sokoban(level)
        if moves is None:
            raise PolicyError("SokobanExpert found no solution from this position (a box is stuck).")
        if not moves:  # already solved: the episode should have ended
            raise PolicyError("SokobanExpert was asked to move in a solved level.")
        return env.format_action(moves[0])


_LAKE_MOVES = ("Up", "Right", "Down", "Left")  # FrozenLake's direction order (agentgym.moves.DIRECTIONS)


class FrozenLakeExpert:
    """The first move of a shortest path to the goal around the holes, one move a turn."""

    def act(self, observation: str, env: Any) -> str:
        lake, position = env.lake, env.position
        first = _first_lake_move(lake, position)
        if first is None:
            raise PolicyError("FrozenLakeExpert found no path to the goal from here.")
        return env.format_action(_LAKE_MOVES[first])


def _first_lake_move(lake: Any, start: int) -> int | None:
    """The direction of the first move of a shortest path from ``start`` to the goal, or None."""
    first: dict[int, int | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == lake.goal:
            return first[cell]
        for direction in range(4):
            nxt = lake.step(cell, direction)
            if nxt not in first and lake.cells[nxt] != "H":
                first[nxt] = direction if first[cell] is None else first[cell]
                queue.append(nxt)
    return None


class BanditExpert:
    """Names the arm with the best expected payout (the observation lists each arm's odds)."""

    def act(self, observation: str, env: Any) -> str:
        return env.format_action(env.arm_names[env._best_arm()])


class GuessNumberExpert:
    """Binary search: guesses the middle of the range the hints so far leave open."""

    def act(self, observation: str, env: Any) -> str:
        low, high = env.low, env.high
        for guess, hint in env.guesses:
            if hint == "higher":
                low = max(low, guess + 1)
            elif hint == "lower":
                high = min(high, guess - 1)
        return env.format_action(str((low + high) // 2))

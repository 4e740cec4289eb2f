"""An independent breadth-first Sokoban solver, used only by the tests."""

from __future__ import annotations

from collections import deque

from agentgym.envs.games.sokoban import Level


def shortest_solution(level: Level, limit: int = 200_000) -> int | None:
    """Fewest moves that solve ``level``; None if unsolvable (or over ``limit`` states)."""
    moves = solve(level, limit)
    return None if moves is None else len(moves)


def solve(level: Level, limit: int = 200_000) -> list[str] | None:
    """A shortest list of moves ("Up", ...) that solves ``level``, or None."""
    width = level.width
    steps = {"Up": -width, "Down": width, "Left": -1, "Right": 1}
    start = (level.player, frozenset(level.boxes))
    parent: dict[tuple, tuple | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        if boxes <= level.targets:
            return _path(parent, state)
        for name, step in steps.items():
            ahead = player + step
            if ahead in level.walls:
                continue
            new_boxes = boxes
            if ahead in boxes:
                beyond = ahead + step
                if beyond in level.walls or beyond in boxes:
                    continue
                new_boxes = (boxes - {ahead}) | {beyond}
            following = (ahead, new_boxes)
            if following not in parent:
                if len(parent) >= limit:
                    return None
                parent[following] = (state, name)
                queue.append(following)
    return None


def _path(parent: dict[tuple, tuple | None], state: tuple) -> list[str]:
    moves = []
    while parent[state] is not None:
        state, move = parent[state]
        moves.append(move)
    return moves[::-1]

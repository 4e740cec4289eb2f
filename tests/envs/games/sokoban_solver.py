"""An independent breadth-first Sokoban solver, used only by the tests."""

from __future__ import annotations

from collections import deque

from agentgym.envs.games.sokoban import Level


def shortest_solution(level: Level, limit: int = 200_000) -> int | None:
    """Fewest moves that solve ``level``; None if unsolvable (or over ``limit`` states)."""
    width = level.width
    steps = (-width, width, -1, 1)
    start = (level.player, frozenset(level.boxes))
    seen = {start}
    queue = deque([(start, 0)])
    while queue:
        (player, boxes), depth = queue.popleft()
        if boxes <= level.targets:
            return depth
        for step in steps:
            ahead = player + step
            if ahead in level.walls:
                continue
            new_boxes = boxes
            if ahead in boxes:
                beyond = ahead + step
                if beyond in level.walls or beyond in boxes:
                    continue
                new_boxes = (boxes - {ahead}) | {beyond}
            state = (ahead, new_boxes)
            if state not in seen:
                if len(seen) >= limit:
                    return None
                seen.add(state)
                queue.append((state, depth + 1))
    return None

"""FrozenLake: walk across a frozen lake to the goal without falling in a hole.

The lake is a grid of frozen cells (``F``) and holes (``H``). The player starts
on ``S`` (top-left) and must reach the goal ``G`` (bottom-right, or a random
cell with ``random_goal=True``) by moving up, down, left or right. Walking off
the edge of the lake is a legal move that leaves the player where it was.
Stepping into a hole ends the episode (a loss); reaching the goal ends it (a
win). On a slippery lake (``is_slippery=True``) each move goes the intended
way with probability 1/3 and each of the two perpendicular ways with 1/3, as in
Gymnasium's ``FrozenLake-v1``; the draw comes from ``self.np_random``.

Maps are random: every cell other than start and goal is a hole with
probability ``hole_probability``; a map is drawn again until a breadth-first
search finds a path from start to goal (after many failed draws, as can happen
for a large lake with many holes, a random right/down path is cleared), so
every generated map can be won.

Rewards (Gymnasium's): 1 for reaching the goal, 0 otherwise (a hole is 0 and
ends the episode); an unreadable or illegal action costs ``format_penalty``.

Hand-made maps load with ``reset(options={"level": "SFFF\\nFHFH\\nFFFH\\nHFFG"})``
(rows of ``S F H G``, spaces ignored; see :func:`parse_level`).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.moves import DIRECTIONS, MoveTurn, Played, play_moves, read_direction
from agentgym.parsing import extract_answer

__all__ = [
    "DIRECTIONS",
    "FROZEN",
    "GOAL",
    "GOAL_REWARD",
    "HOLE",
    "LEGEND",
    "MAX_HOLE_PROBABILITY",
    "MAX_SIZE",
    "PLAYER",
    "PLAYER_IN_HOLE",
    "PLAYER_ON_GOAL",
    "START",
    "FrozenLakeEnv",
    "LakeMap",
    "parse_level",
    "shortest_path",
]

START, FROZEN, HOLE, GOAL = "S", "F", "H", "G"
PLAYER, PLAYER_IN_HOLE, PLAYER_ON_GOAL = "P", "X", "W"
LEGEND = {
    PLAYER: "you",
    START: "the start (frozen, safe)",
    FROZEN: "frozen ice (safe)",
    HOLE: "a hole (stepping in loses)",
    GOAL: "the goal",
    PLAYER_IN_HOLE: "you, fallen into a hole",
    PLAYER_ON_GOAL: "you, on the goal",
}

# Indexed as agentgym.moves.DIRECTIONS (clockwise: up, right, down, left), so the
# two perpendiculars of direction d are (d + 1) % 4 and (d + 3) % 4.
_DELTAS = ((-1, 0), (0, 1), (1, 0), (0, -1))
_SHOWN = tuple(name.capitalize() for name in DIRECTIONS)
_HOW_TO = (
    "write Up, Down, Left or Right (or U, D, L, R), several separated by ||, "
    "e.g. <answer>Up || Left</answer>"
)

GOAL_REWARD = 1.0
_MAX_DRAWS = 50  # random maps tried before a path is cleared by hand
MAX_SIZE = 16
MAX_HOLE_PROBABILITY = 0.6


@functools.lru_cache(maxsize=64)
def _neighbour_table(rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """table[cell][d]: the cell reached moving in direction d (the same cell at the edge)."""
    return tuple(
        tuple(
            (r + dr) * cols + (c + dc)
            if 0 <= r + dr < rows and 0 <= c + dc < cols
            else r * cols + c
            for dr, dc in _DELTAS
        )
        for r in range(rows)
        for c in range(cols)
    )


class LakeMap:
    """A lake: flat list of cells (row-major), its shape, start and goal."""

    __slots__ = ("cells", "rows", "cols", "start", "goal", "neighbours")

    def __init__(self, cells: list[str], rows: int, cols: int) -> None:
        self.cells, self.rows, self.cols = cells, rows, cols
        self.start = cells.index(START)
        self.goal = cells.index(GOAL)
        self.neighbours = _neighbour_table(rows, cols)

    def step(self, cell: int, direction: int) -> int:
        """The cell reached from ``cell`` moving in ``direction`` (same cell at the edge)."""
        return self.neighbours[cell][direction]

    def where(self, cell: int) -> str:
        return f"row {cell // self.cols + 1}, column {cell % self.cols + 1}"


def shortest_path(lake: LakeMap) -> int:
    """Fewest moves from start to goal avoiding holes (breadth-first); -1 if none."""
    cells, goal = lake.cells, lake.goal
    distance = {lake.start: 0}
    queue = deque([lake.start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            return distance[cell]
        for nxt in lake.neighbours[cell]:
            if nxt not in distance and cells[nxt] != HOLE:
                distance[nxt] = distance[cell] + 1
                queue.append(nxt)
    return -1


def parse_level(level: str | Sequence[str]) -> LakeMap:
    """Read a map (a string of rows, or a list of row strings) of ``S F H G``.

    Spaces inside rows are ignored and letters may be lower-case. The map
    must be a rectangle with exactly one ``S`` and one ``G``; it need not be
    winnable (tests use hopeless maps too).
    """
    if isinstance(level, str):
        lines = level.splitlines()
    elif isinstance(level, Sequence) and all(isinstance(row, str) for row in level):
        lines = list(level)
    else:
        raise ConfigError(
            f"options['level'] must be a str of rows or a list of row strings, got {level!r}."
        )
    rows = ["".join(line.split()).upper() for line in lines]
    rows = [row for row in rows if row]
    if not rows or len({len(row) for row in rows}) != 1:
        raise ConfigError("options['level'] must be a rectangle: rows of S/F/H/G of equal length.")
    cells = list("".join(rows))
    unknown = set(cells) - {START, FROZEN, HOLE, GOAL}
    if unknown:
        raise ConfigError(
            f"options['level'] has unknown symbols {sorted(unknown)}; use S, F, H, G."
        )
    if cells.count(START) != 1 or cells.count(GOAL) != 1:
        raise ConfigError(
            f"options['level'] needs exactly one S and one G, found {cells.count(START)} S "
            f"and {cells.count(GOAL)} G."
        )
    return LakeMap(cells, len(rows), len(rows[0]))


class FrozenLakeEnv(TextEnv):
    """Reach the goal across a frozen lake without falling into a hole.

    Args:
        size: the lake is ``size`` x ``size`` (2 to 16).
        hole_probability: chance that a cell is a hole (0 to 0.6); the difficulty.
        is_slippery: moves may slide sideways (1/3 intended, 1/3 each perpendicular).
        random_goal: put the goal on a random cell at least ``size - 1`` moves
            from the start instead of the bottom-right corner.
        max_moves_per_turn: most moves one action may chain with ``||``.
        max_turns: turn limit; default ``size**2`` (enough for any shortest path
            one move per turn), ``3 * size**2`` on a slippery lake.
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    action_format = "<answer>Up</answer> or <answer>Up || Right</answer>"

    def __init__(
        self,
        *,
        size: int = 4,
        hole_probability: float = 0.2,
        is_slippery: bool = False,
        random_goal: bool = False,
        max_moves_per_turn: int = 10,
        max_turns: int | None = None,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        check_number("size", size, minimum=2, maximum=MAX_SIZE)
        check_number(
            "hole_probability", hole_probability, minimum=0,
            maximum=MAX_HOLE_PROBABILITY, integer=False,
        )
        for name, flag in (("is_slippery", is_slippery), ("random_goal", random_goal)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name} must be True or False, got {flag!r}.")
        check_number("max_moves_per_turn", max_moves_per_turn, minimum=1)
        if max_turns is None:
            max_turns = (3 if is_slippery else 1) * size * size
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        self.size = size
        self.hole_probability = float(hole_probability)
        self.is_slippery = is_slippery
        self.random_goal = random_goal
        self.max_moves_per_turn = max_moves_per_turn
        # Goals far enough from the start not to be trivial (random_goal only).
        self._goal_choices = [
            i for i in range(size * size) if i // size + i % size >= size - 1
        ]
        self.lake = LakeMap([START] + [FROZEN] * (size * size - 2) + [GOAL], size, size)
        self.position = self.lake.start
        self._shortest = -1
        self._slips = 0  # slides on the ice this turn

    # -- episode set-up -------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        options = dict(options or {})
        level = options.pop("level", None)
        if options:
            raise ConfigError(
                f"Unknown reset options {sorted(options)}; FrozenLake takes 'level'."
            )
        self.lake = self._generate() if level is None else parse_level(level)
        self.position = self.lake.start
        self._shortest = shortest_path(self.lake)
        slippery = " The ice is slippery: you may slide sideways." if self.is_slippery else ""
        return (
            f"A frozen lake of {self.lake.rows}x{self.lake.cols} cells. Walk from S to the "
            f"goal G without stepping into a hole H.{slippery}\n"
            "Legend: P you, S start, F frozen ice, H hole, G goal.\n\n"
            f"{self.render_text()}\n\nYou are at {self.lake.where(self.position)}. "
            "Move with <answer>Up</answer>, Down, Left or Right; chain moves with ||."
        )

    def _generate(self) -> LakeMap:
        size, rng = self.size, self.np_random
        cells_count = size * size
        for _ in range(_MAX_DRAWS):
            goal = self._draw_goal()
            holes = (rng.random(cells_count) < self.hole_probability).tolist()
            cells = [HOLE if hole else FROZEN for hole in holes]
            cells[0], cells[goal] = START, GOAL
            lake = LakeMap(cells, size, size)
            if shortest_path(lake) >= 0:
                return lake
        return self._clear_path(lake)

    def _draw_goal(self) -> int:
        if not self.random_goal:
            return self.size * self.size - 1
        return self._goal_choices[int(self.np_random.integers(len(self._goal_choices)))]

    def _clear_path(self, lake: LakeMap) -> LakeMap:
        """Clear a random right/down path from the start (top-left) to the goal."""
        row, col = 0, 0
        goal_row, goal_col = divmod(lake.goal, lake.cols)
        downs = [True] * goal_row + [False] * goal_col
        self.np_random.shuffle(downs)
        for down in downs:
            row, col = (row + 1, col) if down else (row, col + 1)
            index = row * lake.cols + col
            if lake.cells[index] == HOLE:
                lake.cells[index] = FROZEN
        return lake

    def _reset_info(self) -> dict[str, Any]:
        return {"shortest_path": self._shortest}

    # -- playing ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        self._slips = 0
        turn = play_moves(
            extract_answer(action), read=read_direction, apply=self._move, is_over=self._over,
            limit=self.max_moves_per_turn, how_to=_HOW_TO,
        )
        return self._outcome(turn)

    def _move(self, name: str) -> Played:
        """Play one move (a name in :data:`~agentgym.moves.DIRECTIONS`), counting slips."""
        direction = DIRECTIONS.index(name)
        actual = direction
        if self.is_slippery:
            # Gymnasium's rule: intended, or either perpendicular, each with 1/3.
            actual = (direction + (0, 1, 3)[int(self.np_random.random() * 3)]) % 4
        head = f"{_SHOWN[direction]}:"
        if actual != direction:
            self._slips += 1
            head += f" you slipped and slid {_SHOWN[actual]};"
        target = self.lake.step(self.position, actual)
        where = self.lake.where(target)
        if target == self.position:
            return Played(note=f"{head} the edge of the lake, you stay at {where}.")
        self.position = target
        cell = self.lake.cells[target]
        if cell == HOLE:
            return Played(note=f"{head} you fell into the hole at {where}. You lose.")
        if cell == GOAL:
            return Played(note=f"{head} you reached the goal at {where}. You win!")
        return Played(note=f"{head} moved to {where}.")

    def _over(self) -> bool:
        return self.lake.cells[self.position] in (HOLE, GOAL)

    def _outcome(self, turn: MoveTurn) -> Outcome:
        # Moves before a bad one were made; the base class applies the penalty.
        lines = [*turn.notes, f"Invalid action: {turn.problem}"] if turn.problem else turn.notes
        won = self.lake.cells[self.position] == GOAL
        return Outcome(
            "\n".join(lines) + "\n\n" + self.render_text(),
            reward=GOAL_REWARD if won else 0.0,
            terminated=self._over(),
            success=won,
            action_valid=turn.valid,
            info={"moves": turn.played, "slips": self._slips},
        )

    # -- text ---------------------------------------------------------------------

    def render_text(self) -> str:
        cells = self.lake.cells.copy()
        under = cells[self.position]
        cells[self.position] = (
            PLAYER_IN_HOLE if under == HOLE else PLAYER_ON_GOAL if under == GOAL else PLAYER
        )
        cols = self.lake.cols
        return "\n".join(" ".join(cells[i : i + cols]) for i in range(0, len(cells), cols))

    def _describe(self) -> str:
        legend = "\n".join(f"  {symbol}  {meaning}" for symbol, meaning in LEGEND.items())
        slippery = (
            "The ice is slippery: each move goes the intended way with probability 1/3 and "
            "slides to each of the two perpendicular directions with probability 1/3.\n"
            if self.is_slippery
            else "The ice is not slippery: every move goes where you say.\n"
        )
        return (
            "You are on a frozen lake, shown as a grid (row 1 at the top, column 1 at the "
            "left). Walk from the start to the goal without stepping into a hole.\n"
            f"Legend:\n{legend}\n"
            "Moves: Up, Down, Left, Right (or U, D, L, R; any case). Walking off the edge of "
            "the lake leaves you where you are.\n"
            f"{slippery}"
            "Write one move inside answer tags, e.g. <answer>Right</answer>, or up to "
            f"{self.max_moves_per_turn} moves separated by ||, e.g. "
            "<answer>Down || Down || Right</answer>; they are made in order and stop at the "
            "first invalid move (moves before it still count) or when the episode ends.\n"
            f"Rewards: {GOAL_REWARD:g} for reaching the goal, 0 for falling into a hole (the "
            "episode ends either way), 0 for every other move."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        return self.format_action(_SHOWN[int(rng.integers(4))])

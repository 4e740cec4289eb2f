"""Sudoku: fill the grid so every row, column and box holds each digit once.

Sizes: 4 (2x2 boxes, digits 1-4, the default: small models can play it) and 9
(3x3 boxes, digits 1-9). Every puzzle has exactly one solution.

Generation: a full solution comes from the classic base pattern with the rows
shuffled within bands, the bands shuffled, the columns within stacks and the
stacks shuffled, the digits relabelled and a random transpose (all from the
seed; fast). Cells are then cleared one by one in a random order; a clearing is
kept only if the puzzle still has exactly one solution (a bitmask backtracking
counter that stops at 2), until ``num_holes`` cells are empty or no further
cell can be cleared (``reset``'s ``info["holes"]`` says how many were).

Moves: ``R C V`` puts V at row R, column C (1-based, as printed around the
grid); ``R C 0`` (or ``clear R C``) empties a cell you filled. You may overwrite
your own entries but never a given. A value that repeats one already in the
same row, column or box is refused (an invalid move, with feedback naming the
clash). A value that clashes with nothing visible but is not the solution's is
allowed: the puzzle then cannot be completed until you overwrite it. An answer
of ``size*size`` digits (0 or '.' empty) is a whole grid: it replaces your
entries and is written row by row as moves, stopping at the first clash.

Rewards: +1 when the grid is solved (it then equals the unique solution);
optionally ``placement_reward`` the first time each cell is filled with its
solution value (0 by default, since it would tell the agent which guesses are
right); an unreadable or illegal move costs the env's ``format_penalty``.

Hand-made puzzles load with ``reset(options={"level": "1.3.\\n..."})`` (digits
row by row, '.' or '0' for an empty cell); they must have exactly one solution.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import islice
from math import isqrt
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.moves import MoveTurn, Played, play_moves
from agentgym.parsing import extract_answer, normalize, read_int

__all__ = ["SudokuEnv", "count_solutions"]

SOLVE_REWARD = 1.0
SIZES = (4, 9)
_FILLER = frozenset({
    "row", "r", "col", "column", "c", "value", "val", "v", "place", "put", "set",
    "write", "at", "in", "to", "is", "=", "-", ">", ":",
})
_CLEAR_WORDS = frozenset({"clear", "erase", "delete", "remove"})
_NUMBER = re.compile(r"\d+")
_MAX_MOVE_WORDS = 16  # "put value 4 in row 2 at column 3" has 7 besides the numbers
_WORD = re.compile(r"[a-z]+|[^\sa-z,;()\[\]]")
_GRID_JUNK = str.maketrans("", "", "|,+-[]()")  # and whitespace: ignored in a whole grid
_HOW_TO = ("write three numbers R C V (row, column, value), e.g. <answer>2 3 4</answer> puts 4 "
           "at row 2, column 3; R C 0 clears a cell you filled")


@lru_cache(maxsize=4)
def _geometry(size: int) -> tuple[tuple[int, int, int], ...]:
    """(row, column, box) of every cell of a ``size`` x ``size`` grid."""
    side = isqrt(size)
    return tuple((r, c, r // side * side + c // side) for r in range(size) for c in range(size))


@lru_cache(maxsize=4)
def _peers(size: int) -> tuple[tuple[int, ...], ...]:
    """The cells sharing a row, column or box with each cell (itself excluded)."""
    units = _geometry(size)
    return tuple(tuple(o for o, other in enumerate(units) if o != cell
                       and any(a == b for a, b in zip(mine, other)))
                 for cell, mine in enumerate(units))


def count_solutions(grid: list[int], size: int, limit: int = 2) -> int:
    """Solutions of ``grid`` (flat, 0 = empty), counting no further than ``limit``."""
    return _solutions(grid, size, limit)[0]


def _solutions(grid: list[int], size: int, limit: int) -> tuple[int, list[int]]:
    """How many solutions (up to ``limit``) and the first one found ([] if none)."""
    geometry = _geometry(size)
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    for cell, value in enumerate(grid):
        if value:
            bit = 1 << (value - 1)
            r, c, b = geometry[cell]
            if (rows[r] | cols[c] | boxes[b]) & bit:
                return 0, []
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
    work, first = list(grid), []
    empties = [cell for cell, value in enumerate(grid) if not value]
    found = _search(empties, (geometry, rows, cols, boxes, work, first), (1 << size) - 1, limit)
    return found, first


def _search(empties: list[int], state: tuple[Any, ...], full: int, limit: int) -> int:
    """Backtracking on the empty cell with the fewest candidates (MRV)."""
    geometry, rows, cols, boxes, work, first = state
    if not empties:
        if not first:
            first.extend(work)
        return 1
    best, best_mask, best_count = 0, 0, 99
    for index, cell in enumerate(empties):
        r, c, b = geometry[cell]
        mask = full & ~(rows[r] | cols[c] | boxes[b])
        count = mask.bit_count()
        if count < best_count:
            best, best_mask, best_count = index, mask, count
            if count <= 1:
                break
    cell = empties[best]
    rest = empties[:best] + empties[best + 1:]
    r, c, b = geometry[cell]
    found = 0
    while best_mask and found < limit:
        bit = best_mask & -best_mask
        best_mask ^= bit
        work[cell] = bit.bit_length()
        rows[r] |= bit
        cols[c] |= bit
        boxes[b] |= bit
        found += _search(rest, state, full, limit - found)
        rows[r] ^= bit
        cols[c] ^= bit
        boxes[b] ^= bit
    return found


def _clash(grid: list[int], size: int, cell: int, value: int) -> str:
    """Where ``value`` already stands in ``cell``'s row, column or box ('' if nowhere)."""
    geometry = _geometry(size)
    r, c, _ = geometry[cell]
    for other in _peers(size)[cell]:
        if grid[other] == value:
            r2, c2, _ = geometry[other]
            unit = f"row {r + 1}" if r2 == r else f"column {c + 1}" if c2 == c else "its box"
            return f"{unit} already has {value} (at row {r2 + 1}, column {c2 + 1})"
    return ""


def _random_solution(rng: np.random.Generator, size: int) -> list[int]:
    """A full grid: the base pattern under random band/row/stack/column/digit shuffles."""
    side = isqrt(size)
    draws = rng.permuted(np.tile(np.arange(side), (2 * side + 2, 1)), axis=1).tolist()
    row_order = [band * side + r for band in draws[0] for r in draws[1 + band]]
    col_order = [stack * side + c for stack in draws[side + 1] for c in draws[side + 2 + stack]]
    digits = (rng.permutation(size) + 1).tolist()
    # The base pattern (side*(r%side) + r//side + c) % size is a valid grid.
    grid = [digits[(side * (r % side) + r // side + c) % size]
            for r in row_order for c in col_order]
    if rng.random() < 0.5:
        grid = [grid[c * size + r] for r in range(size) for c in range(size)]
    return grid


def _cell_value(cell: Any) -> int:
    """A cell of a level or of a whole-grid answer: 0 if empty ('.' or 0), -1 if unreadable."""
    value = 0 if cell in (".", 0) else read_int(str(cell))
    return -1 if value is None else value


def _parse_level(level: Any) -> list[int]:
    """A flat grid from rows of digits ('.' or '0' empty), as a str or a list of rows."""
    rows = level.strip().splitlines() if isinstance(level, str) else level
    if not isinstance(rows, (list, tuple)):
        kind = type(level).__name__
        raise ConfigError(f"options['level'] must be a str or a list of rows, not {kind}.")
    grid: list[int] = []
    for row in rows:
        cells = [ch for ch in row if ch not in " \t|"] if isinstance(row, str) else list(row)
        grid.extend(_cell_value(ch) for ch in cells)
    size = isqrt(len(grid))
    if size not in SIZES or size * size != len(grid) or len(rows) != size:
        raise ConfigError(f"A Sudoku level must be 4 rows of 4 or 9 rows of 9 cells; got "
                          f"{len(rows)} rows and {len(grid)} cells.")
    if any(not 0 <= v <= size for v in grid):
        raise ConfigError(f"A Sudoku level of size {size} holds digits 1-{size} and '.' for "
                          "empty cells.")
    return grid


class SudokuEnv(TextEnv):
    """Sudoku of side ``size`` (4 or 9) whose puzzles have exactly one solution.

    Args:
        size: 4 (2x2 boxes) or 9 (3x3 boxes).
        difficulty: fraction of the cells to clear (0.5 if neither this nor
            ``num_holes`` is given).
        num_holes: number of cells to clear, instead of ``difficulty``. Fewer
            may be cleared when no other cell can go without losing uniqueness.
        placement_reward: paid the first time each cell gets its solution value.
        max_turns: turns per episode.
        max_moves_per_turn: placements allowed in one turn, separated by ``||``.
        format_penalty: cost of an unreadable or illegal move.
    """

    action_format = "<answer>R C V</answer>, e.g. <answer>2 3 4</answer>"

    def __init__(
        self,
        size: int = 4,
        difficulty: float | None = None,
        num_holes: int | None = None,
        placement_reward: float = 0.0,
        max_turns: int = 30,
        max_moves_per_turn: int = 20,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        if isinstance(size, bool) or size not in SIZES:  # bools are ints: True == 1
            raise ConfigError(f"size must be 4 or 9, got {size!r}.")
        if difficulty is not None and num_holes is not None:
            raise ConfigError("Give difficulty (a fraction of cells) or num_holes, not both.")
        if num_holes is None:
            difficulty = 0.5 if difficulty is None else difficulty
            check_number("difficulty", difficulty, minimum=0.0, maximum=1.0, integer=False)
            num_holes = max(1, round(difficulty * size * size))
        check_number("num_holes", num_holes, minimum=1, maximum=size * size)
        check_number("placement_reward", placement_reward, minimum=0, integer=False)
        check_number("max_moves_per_turn", max_moves_per_turn, minimum=1)
        self.size, self.num_holes = size, num_holes
        self.placement_reward = float(placement_reward)
        self.max_moves_per_turn = max_moves_per_turn
        self._size = size
        self._solution = [0] * (size * size)
        self._grid = list(self._solution)
        self._givens = [False] * (size * size)
        self._credited: set[int] = set()

    # -- episodes -------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        if set(options) - {"level"}:
            raise ConfigError(f"Unknown reset options {sorted(options)}; Sudoku takes 'level'.")
        if options.get("level") is not None:
            puzzle = self._load_level(options["level"])
        else:
            self._size = self.size
            self._solution = _random_solution(self.np_random, self.size)
            puzzle = self._dig(list(self._solution))
        self._grid = puzzle
        self._givens = [v != 0 for v in puzzle]
        self._credited = set()
        side = isqrt(self._size)
        return (f"Sudoku {self._size}x{self._size} ({side}x{side} boxes, digits 1-{self._size}). "
                f"Fill every '.' cell.\n{self.render_text()}\nEmpty cells: {self._grid.count(0)}.")

    def _load_level(self, level: Any) -> list[int]:
        puzzle = _parse_level(level)
        size = isqrt(len(puzzle))
        if 0 not in puzzle:
            raise ConfigError("A Sudoku level needs at least one empty cell ('.').")
        found, solution = _solutions(puzzle, size, limit=2)
        if found != 1:
            raise ConfigError(f"A Sudoku level must have exactly one solution; this one has "
                              f"{'none' if found == 0 else 'several'}.")
        self._size, self._solution = size, solution
        return puzzle

    def _dig(self, grid: list[int]) -> list[int]:
        """Clear cells in random order while the solution stays unique."""
        size, peers = self.size, _peers(self.size)
        holes = 0
        for cell in self.np_random.permutation(size * size).tolist():
            if holes == self.num_holes:
                break
            value, grid[cell] = grid[cell], 0
            # Fast path: when the digits around the cell leave it one candidate,
            # any solution of the new puzzle solves the old one, which was unique.
            around = {grid[o] for o in peers[cell]}
            around.discard(0)
            if len(around) == size - 1 or count_solutions(grid, size, limit=2) == 1:
                holes += 1
            else:
                grid[cell] = value
        return grid

    @property
    def grid(self) -> list[list[int]]:
        """The current grid, row by row (0 = empty)."""
        return [self._grid[r:r + self._size] for r in range(0, len(self._grid), self._size)]

    @property
    def solution(self) -> list[list[int]]:
        """The unique solution, row by row (for tests and debugging)."""
        return [self._solution[r:r + self._size] for r in range(0, len(self._grid), self._size)]

    def _reset_info(self) -> dict[str, Any]:
        return {"holes": self._grid.count(0), "size": self._size}

    # -- moves ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        answer, limit = extract_answer(action), self.max_moves_per_turn
        grid = None if answer is None else self._read_grid(answer)
        if grid is not None:  # a whole grid is written as moves, as many as it takes
            answer, limit = " || ".join(self._grid_moves(grid)), len(grid)
        turn = play_moves(answer, read=_parse_move, apply=self._apply, is_over=self._solved,
                          limit=limit, how_to=_HOW_TO)
        return self._outcome(turn)

    def _apply(self, move: tuple[int, int, int]) -> Played | str:
        """Place (or clear, value 0) one cell; return what it did, or why it is not allowed."""
        (row, col, value), size = move, self._size
        where = f"{row} {col} {value}"
        if not (1 <= row <= size and 1 <= col <= size):
            return f"{where}: off the grid; rows and columns go 1-{size}."
        if not 0 <= value <= size:
            return f"{where}: values go 1-{size} (0 clears a cell you filled)."
        cell = (row - 1) * size + col - 1
        if self._givens[cell]:
            return (f"{where}: row {row}, column {col} is a given ({self._grid[cell]}); "
                    "givens cannot change.")
        if value == 0:
            if not self._grid[cell]:
                return f"{where}: row {row}, column {col} is already empty."
            self._grid[cell] = 0
            return Played(note=f"{where}: cleared")
        clash = _clash(self._grid, size, cell, value)
        if clash:
            return f"{where}: {clash}; a digit appears once per row, column and box."
        self._grid[cell] = value
        reward = 0.0
        if value == self._solution[cell] and cell not in self._credited:
            self._credited.add(cell)
            reward = self.placement_reward
        return Played(reward, f"{where}: placed")

    def _solved(self) -> bool:
        return self._grid == self._solution

    def _read_grid(self, answer: str) -> list[int] | None:
        """The answer as a whole grid of size*size digits (0 or '.' empty), else None."""
        if "||" in answer:
            return None
        # str.split and str.translate rather than a regex sub: many times faster
        # when most of a long answer is junk.
        chars = "".join(answer.split()).translate(_GRID_JUNK)
        if len(chars) != self._size ** 2:  # before reading each character: answers can be long
            return None
        cells = [_cell_value(ch) for ch in chars]
        return cells if -1 not in cells else None

    def _grid_moves(self, grid: list[int]) -> list[str]:
        """A whole grid as moves: your entries are cleared, then it is written row by row."""
        size, givens = self._size, self._givens
        self._grid = [v if given else 0 for v, given in zip(self._grid, givens)]
        # A changed given stays in the list so that the move explains why it is refused.
        return [f"{i // size + 1} {i % size + 1} {v}" for i, v in enumerate(grid)
                if v and (not givens[i] or v != self._grid[i])]

    def _outcome(self, turn: MoveTurn) -> Outcome:
        solved = self._solved()
        parts = [note.rstrip(".") + "." for note in turn.notes]
        if turn.problem:
            parts.append(turn.problem)
        parts.append(self.render_text())
        parts.append("Solved: every row, column and box is complete!" if solved
                     else f"Empty cells: {self._grid.count(0)}.")
        return Outcome("\n".join(parts), turn.reward + (SOLVE_REWARD if solved else 0.0),
                       terminated=solved, success=solved, action_valid=turn.valid,
                       info={"moves": turn.played, "empty": self._grid.count(0)})

    # -- text -----------------------------------------------------------------

    def render_text(self) -> str:
        size, side, grid = self._size, isqrt(self._size), self._grid
        stacks = [range(s * side, (s + 1) * side) for s in range(side)]
        rule = "  +" + "+".join("-" * (2 * side + 1) for _ in stacks) + "+"
        lines = ["    " + "   ".join(" ".join(str(c + 1) for c in stack) for stack in stacks), rule]
        for r in range(size):
            cells = (" ".join(str(grid[r * size + c] or ".") for c in stack) for stack in stacks)
            lines.append(f"{r + 1} | " + " | ".join(cells) + " |")
            if r % side == side - 1:
                lines.append(rule)
        return "\n".join(lines)

    def _describe(self) -> str:
        size, side = self.size, isqrt(self.size)
        shaping = (f", +{self.placement_reward:g} the first time a cell gets its correct value"
                   if self.placement_reward else "")
        return (
            f"You are playing Sudoku on a {size}x{size} grid split into {side}x{side} boxes. "
            f"Fill every empty cell with a digit 1-{size} so that each row, each column and each "
            f"box holds every digit 1-{size} exactly once. The puzzle has exactly one solution.\n"
            "Legend: a digit is a given or your entry; '.' is an empty cell. Rows and columns are "
            "numbered from 1 (row 1 is the top, column 1 the left), as printed around the grid.\n"
            "Move: R C V puts the value V in row R, column C, inside answer tags, e.g. "
            "<answer>2 3 4</answer> puts 4 in row 2, column 3. R C 0 clears a cell you filled; "
            "you may overwrite your own entries but not the givens. Up to "
            f"{self.max_moves_per_turn} moves in one turn are separated by ||, e.g. "
            "<answer>1 2 3 || 4 1 2</answer>. You may also answer with the whole grid, "
            f"{size * size} digits row by row (it replaces your entries).\n"
            "A value already present in the same row, column or box is not allowed. "
            f"Rewards: +{SOLVE_REWARD:g} when the grid is solved{shaping}."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        size = self._size
        open_cells = [i for i, g in enumerate(self._givens) if not g] or [0]
        cell = open_cells[int(rng.integers(len(open_cells)))]
        fits = [v for v in range(1, size + 1) if not _clash(self._grid, size, cell, v)]
        value = fits[int(rng.integers(len(fits)))] if fits else int(rng.integers(1, size + 1))
        return self.format_action(f"{cell // size + 1} {cell % size + 1} {value}")


def _parse_move(text: str) -> tuple[int, int, int] | None:
    """``"r2c3=4"`` or ``"2, 3, 4"`` -> ``(2, 3, 4)``; ``clear 2 3`` -> ``(2, 3, 0)``."""
    cleaned = normalize(text)
    # A move has at most three numbers: read a fourth, not every number of a long text.
    read = [read_int(n.group()) for n in islice(_NUMBER.finditer(cleaned), 4)]
    if len(read) > 3:
        return None
    numbers = [n for n in read if n is not None]
    if len(numbers) < len(read):
        return None
    clearing = False
    # Stops at the first stray word, and at a word too many ("- - - ..." is all filler).
    for count, found in enumerate(_WORD.finditer(_NUMBER.sub(" ", cleaned))):
        word = found.group()
        if word in _CLEAR_WORDS:
            clearing = True
        elif word not in _FILLER or count >= _MAX_MOVE_WORDS:
            return None
    if clearing and len(numbers) == 2:
        return numbers[0], numbers[1], 0
    if len(numbers) == 3 and not clearing:
        return numbers[0], numbers[1], numbers[2]
    return None

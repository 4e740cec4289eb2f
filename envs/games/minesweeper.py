"""Minesweeper: reveal every safe cell of a minefield without hitting a mine.

Rules: the board hides ``num_mines`` mines. Revealing a safe cell shows how
many of its (up to eight) neighbours are mines; a cell with no neighbouring
mine ('.') opens its neighbours too, flooding across the empty region.
Revealing a mine ends the game. Flags mark cells you believe are mines; a
flagged cell cannot be revealed until it is unflagged. The game is won when
every safe cell is revealed (flags are not needed). Rows and columns are
numbered from 1, top-left, as printed around the board.

Generation: the mines are drawn at reset from the seed, then a safe opening is
revealed for the agent: a random cell with no neighbouring mine (flooded), or a
random numbered cell when that flood would already win. So the level depends on
the seed alone and the agent never has to guess its first move. With
``no_guess=True`` (the default) a board is redrawn, up to 30 times,
until a deduction solver (single-cell, subset and mine-count rules) clears it
from the opening: every such level can be solved by logic, without guessing.
``reset`` reports in ``info["no_guess"]`` whether that was proved.

Rewards: +0.1 per newly revealed safe cell, +1 when every safe cell is
revealed, -1 for revealing a mine (which ends the episode); an unreadable or
illegal move costs the env's ``format_penalty``.

Hand-made boards load with ``reset(options={"level": "*..\\n...\\n..*"})``
('*' a mine, '.' a safe cell); they start fully hidden, with no opening.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.moves import MoveTurn, Played, play_moves
from agentgym.parsing import extract_answer, match_choice, normalize, read_int

__all__ = ["LEGEND", "MinesweeperEnv"]

REVEAL_REWARD = 0.1
WIN_REWARD = 1.0
MINE_REWARD = -1.0
LEGEND = {
    "?": "hidden cell",
    "F": "flag (a cell you marked as a mine)",
    "1-8": "revealed safe cell: the number of mines among its 8 neighbours",
    ".": "revealed safe cell with no neighbouring mine",
    "*": "mine (shown when the game is over)",
}
_ATTEMPTS = 30  # boards drawn per reset before a guess-needing one is accepted
_HIDDEN, _OPEN, _FLAGGED = 0, 1, 2
_VERBS = {
    "reveal": "reveal", "open": "reveal", "click": "reveal", "dig": "reveal", "r": "reveal",
    "flag": "flag", "mark": "flag", "f": "flag",
    "unflag": "unflag", "unmark": "unflag", "u": "unflag",
}
_HOW_TO = ("write reveal R C, flag R C or unflag R C with a row and a column number, "
           "e.g. <answer>reveal 2 3</answer>")
# ``[a-z]++`` is possessive: backtracking into the verb could never make a
# match (a shorter verb leaves the same text after it), and on a long word it
# took a step per letter.
_MOVE = re.compile(
    r"([a-z]++)\s*[(\[]?\s*(?:row\s*)?(-?\d+)\s*(?:,\s*|\s+)(?:col(?:umn)?\s*)?(-?\d+)\s*[)\]]?"
)


@lru_cache(maxsize=64)
def _neighbours(rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """The up-to-8 neighbours of every cell of a ``rows`` x ``cols`` board (cached)."""
    table = []
    for r in range(rows):
        for c in range(cols):
            table.append(tuple(
                rr * cols + cc
                for rr in range(max(r - 1, 0), min(r + 2, rows))
                for cc in range(max(c - 1, 0), min(c + 2, cols))
                if (rr, cc) != (r, c)
            ))
    return tuple(table)


def _parse_move(text: str) -> tuple[str, int, int] | None:
    """``"Reveal (2, 3)"`` -> ``("reveal", 2, 3)``; ``None`` if unreadable."""
    found = _MOVE.fullmatch(normalize(text))
    if found is None:
        return None
    verb = match_choice(found.group(1), _VERBS)
    row, col = read_int(found.group(2)), read_int(found.group(3))
    if verb is None or row is None or col is None:
        return None
    return verb, row, col


def _bits(mask: int) -> list[int]:
    cells = []
    while mask:
        low = mask & -mask
        cells.append(low.bit_length() - 1)
        mask ^= low
    return cells


def _deduce(status: list[int], counts: list[int], nbrs: tuple[tuple[int, ...], ...],
            mines_left: int) -> tuple[int, int]:
    """Cells provably safe and provably mines (bitmasks) from the open numbers."""
    constraints = []
    for i, state in enumerate(status):
        if state != _OPEN:
            continue
        mask, need = 0, counts[i]
        for j in nbrs[i]:
            if status[j] == _HIDDEN:
                mask |= 1 << j
            elif status[j] == _FLAGGED:
                need -= 1
        if mask:
            constraints.append((mask, need))
    safe = mine = 0
    for mask, need in constraints:
        if need == 0:
            safe |= mask
        elif need == mask.bit_count():
            mine |= mask
    if safe | mine:
        return safe, mine
    for a, need_a in constraints:  # a inside b: the rest of b holds the difference
        for b, need_b in constraints:
            if a != b and a & b == a:
                rest = b & ~a
                if need_b == need_a:
                    safe |= rest
                elif need_b - need_a == rest.bit_count():
                    mine |= rest
    if not (safe | mine):
        hidden = sum(1 << i for i, state in enumerate(status) if state == _HIDDEN)
        if mines_left == 0:
            safe = hidden
        elif mines_left == hidden.bit_count():
            mine = hidden
    return safe, mine


def _solvable(mines: list[bool], counts: list[int], opened: list[bool],
              nbrs: tuple[tuple[int, ...], ...]) -> bool:
    """Whether deduction alone reveals every safe cell from ``opened``."""
    status = [_OPEN if o else _HIDDEN for o in opened]
    todo = sum(1 for i, o in enumerate(opened) if not o and not mines[i])
    mines_left = sum(mines)
    while todo:
        safe, mine = _deduce(status, counts, nbrs, mines_left)
        if not (safe | mine):
            return False
        for i in _bits(safe):
            status[i] = _OPEN
            todo -= 1
        for i in _bits(mine):
            status[i] = _FLAGGED
            mines_left -= 1
    return True


def _parse_level(text: str) -> list[list[bool]]:
    """Rows of mines from a board drawn with '*' (mine) and '.' (safe)."""
    if not isinstance(text, str):
        kind = type(text).__name__
        raise ConfigError(f"options['level'] must be a str of '*' and '.', not {kind}.")
    lines = [line.replace(" ", "") for line in text.strip().splitlines() if line.strip()]
    if not lines or len({len(line) for line in lines}) != 1:
        raise ConfigError("A Minesweeper level must be a rectangle of rows of equal length.")
    if set("".join(lines)) - {"*", "."}:
        raise ConfigError("A Minesweeper level uses only '*' (mine) and '.' (safe cell).")
    if "." not in "".join(lines):
        raise ConfigError("A Minesweeper level needs at least one safe cell ('.').")
    return [[ch == "*" for ch in line] for line in lines]


class MinesweeperEnv(TextEnv):
    """Minesweeper on a ``rows`` x ``cols`` board with ``num_mines`` mines.

    Args:
        rows, cols: board size, 2 to 30 each.
        num_mines: mines on the board (the difficulty); at least 1, and at
            least 2 cells must stay safe.
        no_guess: redraw boards until one can be cleared by logic alone.
        max_turns: turns per episode.
        max_moves_per_turn: moves allowed in one turn, separated by ``||``.
        format_penalty: cost of an unreadable or illegal move.
    """

    action_format = "<answer>reveal R C</answer> or <answer>flag R C</answer>"

    def __init__(
        self,
        rows: int = 5,
        cols: int = 5,
        num_mines: int = 4,
        no_guess: bool = True,
        max_turns: int = 30,
        max_moves_per_turn: int = 10,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        check_number("rows", rows, minimum=2, maximum=30)
        check_number("cols", cols, minimum=2, maximum=30)
        check_number("num_mines", num_mines, minimum=1, maximum=rows * cols - 2)
        check_number("max_moves_per_turn", max_moves_per_turn, minimum=1)
        if not isinstance(no_guess, bool):
            raise ConfigError(f"no_guess must be True or False, got {no_guess!r}.")
        self.rows, self.cols, self.num_mines = rows, cols, num_mines
        self.no_guess = no_guess
        self.max_moves_per_turn = max_moves_per_turn
        self._set_board(rows, cols, [False] * (rows * cols))
        self._proved = False
        self._exploded: int | None = None

    # -- episodes -------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        if set(options) - {"level"}:
            raise ConfigError(f"Unknown reset options {sorted(options)}; use 'level'.")
        self._exploded = None
        if options.get("level") is not None:
            grid = _parse_level(options["level"])
            self._set_board(len(grid), len(grid[0]), [m for row in grid for m in row])
            self._proved = False
        else:
            self._generate()
        return (
            f"Minesweeper, {self._rows}x{self._cols} with {self._mine_total} mines. "
            f"Reveal every safe cell.\n{self.render_text()}\n{self._status_line()}"
        )

    def _set_board(self, rows: int, cols: int, mines: list[bool]) -> None:
        self._rows, self._cols = rows, cols
        self._nbrs = _neighbours(rows, cols)
        self._mines = mines
        self._counts = [sum(mines[j] for j in self._nbrs[i]) for i in range(rows * cols)]
        self._status = [_HIDDEN] * (rows * cols)
        self._mine_total = sum(mines)
        self._hidden_safe = rows * cols - self._mine_total

    def _generate(self) -> None:
        n, rng = self.rows * self.cols, self.np_random
        for _ in range(_ATTEMPTS):
            picks = set(rng.choice(n, size=self.num_mines, replace=False).tolist())
            self._set_board(self.rows, self.cols, [i in picks for i in range(n)])
            self._open_start(rng)
            self._proved = self.no_guess and _solvable(
                self._mines, self._counts, [s == _OPEN for s in self._status], self._nbrs
            )
            if self._proved or not self.no_guess:
                return

    def _open_start(self, rng: np.random.Generator) -> None:
        """Reveal a random empty cell; a numbered one if that flood would win at once."""
        zeros = [i for i, mine in enumerate(self._mines) if not mine and not self._counts[i]]
        if zeros:
            self._flood(zeros[int(rng.integers(len(zeros)))])
            if self._hidden_safe > 0:
                return
            self._status = [_HIDDEN] * len(self._mines)
            self._hidden_safe = len(self._mines) - self._mine_total
        # A mine always has a safe neighbour somewhere, so numbered cells exist.
        numbered = [i for i, mine in enumerate(self._mines) if not mine and self._counts[i]]
        self._flood(numbered[int(rng.integers(len(numbered)))])

    def _flood(self, start: int) -> int:
        """Reveal ``start`` (safe) and flood from empty cells; return cells revealed."""
        status, counts, nbrs = self._status, self._counts, self._nbrs
        stack, revealed = [start], 0
        while stack:
            cell = stack.pop()
            if status[cell] != _HIDDEN:
                continue
            status[cell] = _OPEN
            revealed += 1
            if counts[cell] == 0:
                stack.extend(j for j in nbrs[cell] if status[j] == _HIDDEN)
        self._hidden_safe -= revealed
        return revealed

    @property
    def mine_cells(self) -> list[tuple[int, int]]:
        """Where the mines are, as 1-based (row, column) pairs (for tests and debugging)."""
        cols = self._cols
        return [(i // cols + 1, i % cols + 1) for i, mine in enumerate(self._mines) if mine]

    def _reset_info(self) -> dict[str, Any]:
        return {"no_guess": self._proved, "hidden_safe": self._hidden_safe}

    # -- moves ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        turn = play_moves(extract_answer(action), read=_parse_move, apply=self._apply,
                          is_over=self._over, limit=self.max_moves_per_turn, how_to=_HOW_TO)
        return self._outcome(turn)

    def _apply(self, move: tuple[str, int, int]) -> Played | str:
        """Play one move; return what it did, or why it is not allowed."""
        verb, row, col = move
        where = f"{verb} {row} {col}"
        if not (1 <= row <= self._rows and 1 <= col <= self._cols):
            return f"{where}: off the board; rows go 1-{self._rows} and columns 1-{self._cols}."
        cell = (row - 1) * self._cols + (col - 1)
        state = self._status[cell]
        if state == _OPEN:
            return f"{where}: that cell is already revealed; pick a '?' cell."
        if verb == "flag":
            if state == _FLAGGED:
                return f"{where}: that cell is already flagged."
            self._status[cell] = _FLAGGED
            return Played(note=f"{where}: flagged")
        if verb == "unflag":
            if state != _FLAGGED:
                return f"{where}: that cell has no flag to remove."
            self._status[cell] = _HIDDEN
            return Played(note=f"{where}: flag removed")
        if state == _FLAGGED:
            return f"{where}: that cell is flagged; unflag it first to reveal it."
        if self._mines[cell]:
            self._exploded = cell
            return Played(MINE_REWARD, f"{where}: BOOM, that was a mine. Game over")
        opened = self._flood(cell)
        reward = REVEAL_REWARD * opened + (WIN_REWARD if self._hidden_safe == 0 else 0.0)
        return Played(reward, f"{where}: revealed {opened} cell{'s' * (opened != 1)}")

    def _over(self) -> bool:
        return self._exploded is not None or self._hidden_safe == 0

    def _outcome(self, turn: MoveTurn) -> Outcome:
        won = self._hidden_safe == 0
        parts = [note.rstrip(".") + "." for note in turn.notes]
        if turn.problem:
            parts.append(turn.problem)
        parts.append(self.render_text())
        parts.append("You win: every safe cell is revealed!" if won else self._status_line())
        return Outcome("\n".join(parts), turn.reward, terminated=self._over(), success=won,
                       action_valid=turn.valid,
                       info={"moves": turn.played, "hidden_safe": self._hidden_safe,
                             "mine_hit": self._exploded is not None})

    # -- text -----------------------------------------------------------------

    def _status_line(self) -> str:
        if self._exploded is not None:
            return "You hit a mine: the game is over."
        flags = self._status.count(_FLAGGED)
        return (f"Safe cells still hidden: {self._hidden_safe}. Mines: {self._mine_total}. "
                f"Flags placed: {flags}.")

    def _symbol(self, cell: int, show_mines: bool) -> str:
        if show_mines and self._mines[cell]:
            return "*"
        state = self._status[cell]
        if state == _HIDDEN:
            return "?"
        if state == _FLAGGED:
            return "F"
        count = self._counts[cell]
        return str(count) if count else "."

    def render_text(self) -> str:
        rows, cols = self._rows, self._cols
        show = self._over()
        width, label = len(str(cols)), len(str(rows))
        lines = [" " * label + "  " + " ".join(str(c).rjust(width) for c in range(1, cols + 1))]
        for r in range(rows):
            cells = " ".join(self._symbol(r * cols + c, show).rjust(width) for c in range(cols))
            lines.append(f"{str(r + 1).rjust(label)}  {cells}")
        return "\n".join(lines)

    def _describe(self) -> str:
        legend = "\n".join(f"  {symbol:<4} {meaning}" for symbol, meaning in LEGEND.items())
        return (
            "You are playing Minesweeper. Some cells hide mines. Reveal every safe cell "
            "without revealing a mine. A revealed number says how many of the 8 neighbouring "
            "cells (including diagonals) are mines; revealing a cell with no neighbouring mine "
            "also reveals its neighbours. Flags are optional notes for yourself.\n"
            f"Legend:\n{legend}\n"
            "Rows and columns are numbered from 1 (row 1 is the top, column 1 the left), as "
            "printed around the board. Moves: reveal R C, flag R C, unflag R C, written inside "
            "answer tags, e.g. <answer>reveal 2 3</answer> reveals row 2, column 3. Up to "
            f"{self.max_moves_per_turn} moves in one turn are separated by ||, e.g. "
            "<answer>flag 1 1 || reveal 1 2</answer>.\n"
            f"Rewards: +{REVEAL_REWARD:g} per safe cell revealed, +{WIN_REWARD:g} when every "
            f"safe cell is revealed, {MINE_REWARD:g} for revealing a mine (the game ends). "
            "Revealing a revealed or flagged cell, or a cell off the board, is not allowed."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        hidden = [i for i, state in enumerate(self._status) if state == _HIDDEN] or [0]
        row, col = divmod(hidden[int(rng.integers(len(hidden)))], self._cols)
        verb = "flag" if rng.random() < 0.2 else "reveal"
        return self.format_action(f"{verb} {row + 1} {col + 1}")

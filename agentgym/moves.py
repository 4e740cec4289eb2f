"""Turns that hold several moves (``<answer>Up || Left</answer>``), played one way everywhere.

The rule, the same in every move-based game: moves are read and played in
order; the turn stops at the first move that cannot be read or is not allowed
(the moves before it still count, the action is marked invalid), at the
per-turn limit (the rest are ignored, the action is marked invalid), or as soon
as the game ends (the rest are ignored, the action stays valid).

A game supplies ``read`` (text to a move, or None) and ``apply`` (play a move,
returning :class:`Played`, or a ``str`` saying why it is not allowed)::

    turn = play_moves(extract_answer(action), read=read_direction, apply=self._push,
                      is_over=self._solved, limit=self.max_moves_per_turn,
                      how_to="write Up, Down, Left or Right, e.g. <answer>Left</answer>")
    turn.reward, turn.notes, turn.problem, turn.played
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from agentgym.parsing import match_choice, split_moves

__all__ = ["DIRECTIONS", "MoveTurn", "Played", "play_moves", "read_direction"]

_M = TypeVar("_M")

#: The four grid directions, in the order games index them.
DIRECTIONS = ("up", "right", "down", "left")
_DIRECTION_ALIASES = {name: name for name in DIRECTIONS} | {name[0]: name for name in DIRECTIONS}


def read_direction(text: str) -> str | None:
    """``"Up"``, ``" u "``, ``"LEFT."`` -> ``"up"``, ``"left"``; anything else -> None."""
    return match_choice(text, _DIRECTION_ALIASES)


@dataclass(slots=True)
class Played:
    """What one allowed move did: its reward and a short note for the observation."""

    reward: float = 0.0
    note: str = ""


@dataclass(slots=True)
class MoveTurn:
    """The result of a turn of moves."""

    reward: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: Why the action is invalid (None when it is valid).
    problem: str | None = None
    #: Moves played this turn.
    played: int = 0

    @property
    def valid(self) -> bool:
        return self.problem is None


def play_moves(
    answer: str | None,
    *,
    read: Callable[[str], _M | None],
    apply: Callable[[_M], Played | str],
    is_over: Callable[[], bool],
    limit: int,
    how_to: str,
) -> MoveTurn:
    """Play the moves of ``answer`` (the text inside the answer tags) by the rule above.

    ``how_to`` ends every complaint about the format, e.g. "write Up, Down,
    Left or Right, e.g. <answer>Left</answer>".
    """
    turn = MoveTurn()
    if answer is None:
        turn.problem = f"No action found inside <answer></answer>: {how_to}."
        return turn
    moves = split_moves(answer)
    if not moves:
        turn.problem = f"The answer is empty: {how_to}."
        return turn
    for index, text in enumerate(moves):
        if index >= limit:
            turn.problem = f"At most {limit} moves per turn; the other {len(moves) - limit} were ignored."
            break
        move = read(text)
        if move is None:
            turn.problem = f"{text[:40]!r} is not a move: {how_to}."
            break
        result = apply(move)
        if isinstance(result, str):
            turn.problem = result
            break
        turn.reward += result.reward
        turn.played += 1
        if result.note:
            turn.notes.append(result.note)
        if is_over():
            if index + 1 < len(moves):
                turn.notes.append(f"The game is over: {len(moves) - index - 1} move(s) not played.")
            break
    return turn

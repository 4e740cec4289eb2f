from __future__ import annotations

import pytest

from agentgym.moves import Played, play_moves, read_direction
from agentgym.parsing import read_int

HOW_TO = "write a number"


class Counter:
    """A toy game: add numbers; 0 is not allowed; reaching 10 ends it."""

    def __init__(self) -> None:
        self.total = 0

    def apply(self, value: int) -> Played | str:
        if value == 0:
            return "0 is not allowed"
        self.total += value
        return Played(reward=float(value), note=f"+{value}")

    def play(self, answer: str | None, limit: int = 3):
        return play_moves(answer, read=read_int, apply=self.apply,
                          is_over=lambda: self.total >= 10, limit=limit, how_to=HOW_TO)


def test_all_moves_play_in_order() -> None:
    game = Counter()
    turn = game.play("1 || 2||3")
    assert (turn.valid, turn.played, turn.reward, turn.notes) == (True, 3, 6.0, ["+1", "+2", "+3"])


@pytest.mark.parametrize(
    ("answer", "problem"),
    [(None, "No action found inside <answer></answer>: write a number."),
     (" || ", "The answer is empty: write a number."),
     ("1 || x", "'x' is not a move: write a number."),
     ("1 || 0 || 2", "0 is not allowed")],
)
def test_the_turn_stops_at_the_first_bad_move(answer: str | None, problem: str) -> None:
    game = Counter()
    turn = game.play(answer)
    assert turn.problem == problem and not turn.valid
    assert game.total == (1 if answer and answer.startswith("1") else 0)


def test_moves_over_the_limit_are_ignored_and_flagged() -> None:
    game = Counter()
    turn = game.play("1||1||1||1||1", limit=2)
    assert game.total == 2 and turn.played == 2
    assert turn.problem == "At most 2 moves per turn; the other 3 were ignored."


def test_the_game_ending_stops_the_turn_and_stays_valid() -> None:
    game = Counter()
    turn = game.play("9 || 1 || 5")
    assert game.total == 10 and turn.valid and turn.played == 2
    assert turn.notes[-1] == "The game is over: 1 move(s) not played."


@pytest.mark.parametrize(("text", "move"), [("Up", "up"), (" u ", "up"), ("LEFT.", "left"),
                                            ("r", "right"), ("Down!", "down"), ("north", None)])
def test_read_direction(text: str, move: str | None) -> None:
    assert read_direction(text) == move


@pytest.mark.parametrize(("text", "value"), [("42", 42), (" -7 ", -7), ("+3", 3), ("4.0", None),
                                             ("9" * 5000, None), ("", None), ("1 2", None)])
def test_read_int_never_raises(text: str, value: int | None) -> None:
    assert read_int(text) == value

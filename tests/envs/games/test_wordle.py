"""Wordle: the marking rule, the word list, guesses, limits, config."""

from __future__ import annotations

from collections import Counter
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.games.wordle import WordleEnv, load_words, score_guess
from agentgym.errors import ConfigError
from fakes import make_game

ID = "Wordle-LLM-v0"


make = partial(make_game, ID, WordleEnv)


def with_answer(word: str, **kwargs: object) -> WordleEnv:
    env = make(**kwargs)
    env.reset(seed=0, options={"level": word})
    return env


def guess(word: str) -> str:
    return f"<answer>{word}</answer>"


# -- the marking rule --------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "word", "marks"),
    [
        ("abbey", "babes", "YYGGX"),
        ("crane", "eerie", "XXYXG"),
        ("crane", "crane", "GGGGG"),
        ("crane", "nacre", "YYYYG"),
        ("those", "geese", "XXXGG"),
        ("lever", "eerie", "YGYXX"),
        ("speed", "abide", "XXXYY"),
        ("abbey", "kebab", "XYGYY"),
        ("allay", "lolly", "YXGXG"),
    ],
)
def test_marks_follow_the_two_pass_rule(answer: str, word: str, marks: str) -> None:
    assert score_guess(word, answer) == marks


_WORDS = st.text(alphabet="abcde", min_size=5, max_size=5)


@settings(max_examples=300, deadline=None)
@given(answer=_WORDS, word=_WORDS)
def test_marks_count_each_letter_at_most_as_often_as_the_answer_has_it(
    answer: str, word: str
) -> None:
    marks = score_guess(word, answer)
    assert [m == "G" for m in marks] == [g == a for g, a in zip(word, answer)]
    for letter in set(word):
        marked = sum(1 for g, m in zip(word, marks) if g == letter and m != "X")
        assert marked == min(word.count(letter), answer.count(letter))


# -- the word list -----------------------------------------------------------------


def test_the_word_list_is_large_clean_and_cached() -> None:
    words = load_words()
    assert len(words) >= 1000
    assert all(len(w) == 5 and w.isascii() and w.isalpha() and w.islower() for w in words)
    assert list(words) == sorted(set(words))
    assert load_words() is words
    assert {"crane", "eerie", "abbey", "those", "speed"} <= set(words)


# -- rules -------------------------------------------------------------------------


def test_the_right_word_wins() -> None:
    env = with_answer("crane")
    observation, reward, terminated, truncated, info = env.step(guess("crane"))
    assert reward == 1.0 and terminated and not truncated and info["success"]
    assert info["greens"] == 5 and "solved" in observation


def test_a_wrong_guess_shows_marks_board_and_letters() -> None:
    env = with_answer("crane")
    observation, reward, terminated, _, info = env.step(guess("eerie"))
    assert reward == 0.0 and not terminated and info["action_valid"] and not info["success"]
    assert info["guess"] == "eerie" and info["greens"] == 1 and info["yellows"] == 1
    assert "EERIE -> XXYXG" in observation
    assert "1. E E R I E\n   X X Y X G" in observation
    assert "Letters in the word: e, r" in observation
    assert "Letters not in the word: i" in observation
    assert "Guesses left: 5" in observation
    observation, *_ = env.step(guess("train"))
    assert "2. T R A I N\n   X G G X Y" in observation and "1. E E R I E" in observation
    assert "Letters in the word: a, e, n, r" in observation


def test_show_letters_can_be_turned_off() -> None:
    env = with_answer("crane", show_letters=False)
    observation, *_ = env.step(guess("eerie"))
    assert "Letters in the word" not in observation and "X X Y X G" in observation


@pytest.mark.parametrize(
    "action", ["<ANSWER> CRANE. </answer>", "<answer>C R A N E</answer>", "so... <answer>Crane"]
)
def test_guesses_are_read_tolerantly(action: str) -> None:
    env = with_answer("crane")
    *_, info = env.step(action)
    assert info["success"]


@pytest.mark.parametrize(
    ("action", "why"),
    [
        ("crane", "inside answer tags"),
        (guess("cran"), "not a 5-letter word"),
        (guess("cranes"), "not a 5-letter word"),
        (guess("cr4ne"), "not a 5-letter word"),
        (guess("crâne"), "not a 5-letter word"),
        (guess("zzzzz"), "not in the word list"),
        (guess("crane || slate"), "one word per turn"),
        (guess("x" * 10_000), "not a 5-letter word"),
    ],
)
def test_invalid_guesses_are_feedback(action: str, why: str) -> None:
    env = with_answer("crane", format_penalty=0.3)
    observation, reward, terminated, truncated, info = env.step(action)
    assert not info["action_valid"] and reward == pytest.approx(-0.3)
    assert not terminated and not truncated
    assert why in observation and "<answer>crane</answer>" in observation
    assert "Guesses left: 5" in observation
    assert env.guesses == []


def test_strict_words_off_accepts_any_five_letters() -> None:
    env = with_answer("abbey", strict_words=False)
    observation, reward, _, _, info = env.step(guess("babes"))
    assert info["action_valid"] and reward == 0.0 and "BABES -> YYGGX" in observation
    *_, info = env.step(guess("zzzzz"))
    assert info["action_valid"]


def test_a_hand_made_answer_outside_the_list_can_be_guessed() -> None:
    env = with_answer("qwert")
    *_, info = env.step(guess("qwert"))
    assert info["success"]


def test_running_out_of_turns_truncates_and_reveals_the_word() -> None:
    env = with_answer("crane", max_turns=3)
    for word in ("eerie", "train"):
        observation, _, _, truncated, _ = env.step(guess(word))
        assert not truncated and "CRANE" not in observation
    observation, reward, terminated, truncated, info = env.step(guess("crate"))
    assert truncated and not terminated and not info["success"] and reward == 0.0
    assert "The word was CRANE." in observation


def test_an_invalid_last_turn_also_reveals_the_word() -> None:
    env = with_answer("crane", max_turns=2)
    env.step(guess("train"))
    observation, _, _, truncated, _ = env.step("no idea")
    assert truncated and "The word was CRANE." in observation


def test_green_credit_pays_for_greens_on_the_last_turn_only() -> None:
    env = with_answer("crane", max_turns=2, green_credit=0.1)
    _, reward, *_ = env.step(guess("crate"))
    assert reward == 0.0
    _, reward, _, truncated, _ = env.step(guess("crate"))
    assert truncated and reward == pytest.approx(0.4)
    assert "0.1 per green letter" in env.instructions


# -- generation --------------------------------------------------------------------


def test_answers_come_from_the_list_and_follow_the_seed() -> None:
    env = make()
    words = set(load_words())
    answers = []
    for seed in range(200):
        observation, _ = env.reset(seed=seed)
        task = observation.replace(env.action_format, "").lower()
        assert env.answer in words and env.answer not in task
        answers.append(env.answer)
    assert answers == [(env.reset(seed=s), env.answer)[1] for s in range(200)]
    assert len(set(answers)) > 150
    assert max(Counter(answers).values()) <= 3


def test_every_answer_can_be_found() -> None:
    env = make()
    for seed in range(200):
        env.reset(seed=seed)
        *_, info = env.step(guess(env.answer))
        assert info["success"]


def test_random_actions_are_valid_guesses() -> None:
    env = make()
    rng = np.random.default_rng(0)
    for seed in range(20):
        env.reset(seed=seed)
        *_, info = env.step(env.random_action(rng))
        assert info["action_valid"]


def test_instructions_explain_legend_format_and_rewards() -> None:
    text = make().instructions
    for needle in ("G = right letter", "Y = in the word", "X = not in the word",
                   "<answer>crane</answer>", "1 for finding the word", "6 turn"):
        assert needle in text


def test_check_env_passes() -> None:
    check_env(gym.make(ID).unwrapped)


# -- config ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"strict_words": "yes"}, "strict_words must be True or False"),
        ({"show_letters": 0}, "show_letters must be True or False"),
        ({"green_credit": 0.5}, "green_credit must be at most 0.2"),
        ({"green_credit": -0.1}, "green_credit must be at least 0"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
    ],
)
def test_config_errors_name_the_argument(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make(**kwargs)


@pytest.mark.parametrize("level", ["cat", "cr4ne", 12345, "crânes"])
def test_bad_levels_are_config_errors(level: object) -> None:
    with pytest.raises(ConfigError, match="level"):
        make().reset(seed=0, options={"level": level})

from __future__ import annotations

import pytest

from agentgym.core import (
    MAX_ACTION_CHARS,
    MAX_OBSERVATION_CHARS,
    Outcome,
    TextEnv,
    check_number,
    cut_action,
    utf8_safe,
)
from agentgym.errors import ConfigError, EnvUsageError, ResetNeeded
from fakes import EchoEnv


def test_win_sets_success_and_terminates(echo_env: EchoEnv) -> None:
    echo_env.reset(seed=0)
    observation, reward, terminated, truncated, info = echo_env.step(
        f"<answer>{echo_env.secret.upper()}</answer>"
    )
    assert (observation, reward, terminated, truncated) == ("Right.", 1.0, True, False)
    assert info == {"action_valid": True, "success": True, "turn": 1}


def test_unreadable_action_costs_the_format_penalty(echo_env: EchoEnv) -> None:
    echo_env.reset(seed=0)
    _, reward, terminated, _, info = echo_env.step("hmm")
    assert reward == -0.5
    assert not terminated
    assert info["action_valid"] is False and info["success"] is False


def test_turn_limit_truncates_and_says_so() -> None:
    env = EchoEnv(max_turns=2)
    env.reset(seed=0)
    assert env.step("<answer>no</answer>")[3] is False
    observation, _, terminated, truncated, info = env.step("<answer>no</answer>")
    assert (terminated, truncated, info["turn"]) == (False, True, 2)
    assert "turn limit (2)" in observation


def test_a_single_turn_env_terminates_after_any_answer() -> None:
    env = EchoEnv(max_turns=1)
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("no tags")
    assert (terminated, truncated, reward, info["success"]) == (True, False, -0.5, False)
    assert "turn limit" not in observation


def test_step_before_reset_and_after_the_end_raise(echo_env: EchoEnv) -> None:
    with pytest.raises(ResetNeeded, match=r"needs reset\(\)"):
        echo_env.step("<answer>x</answer>")
    echo_env.reset(seed=0)
    echo_env.step(f"<answer>{echo_env.secret}</answer>")
    with pytest.raises(ResetNeeded, match="after an episode ends"):
        echo_env.step("<answer>x</answer>")


def test_non_str_action_is_a_usage_error(echo_env: EchoEnv) -> None:
    echo_env.reset(seed=0)
    with pytest.raises(EnvUsageError, match="needs a str, got bytes"):
        echo_env.step(b"<answer>x</answer>")  # type: ignore[arg-type]


def test_reset_seeds_the_episode(echo_env: EchoEnv) -> None:
    words = {echo_env.reset(seed=seed)[0] for seed in range(20)}
    assert len(words) > 1
    assert echo_env.reset(seed=5) == echo_env.reset(seed=5)


def test_instructions_add_turn_limit_and_penalty(echo_env: EchoEnv) -> None:
    text = echo_env.instructions
    assert text.startswith("Repeat the secret word")
    assert "at most 3 turn(s)" in text and "costs 0.5" in text


def test_render_modes() -> None:
    assert EchoEnv().render() is None
    env = EchoEnv(render_mode="ansi")
    env.reset(seed=0)
    assert env.render() == f"secret={env.secret} turn=0"


def test_human_render_prints(capsys: pytest.CaptureFixture[str]) -> None:
    env = EchoEnv(render_mode="human")
    env.reset(seed=0)
    assert "secret=" in capsys.readouterr().out


def test_huge_observations_are_cut() -> None:
    class Loud(EchoEnv):
        def _play(self, action: str) -> Outcome:
            return Outcome("x" * (MAX_OBSERVATION_CHARS * 2))

    env = Loud()
    env.reset(seed=0)
    observation = env.step("")[0]
    assert len(observation) == MAX_OBSERVATION_CHARS
    assert observation.endswith("observation cut ...]")
    assert observation in env.observation_space


class Recorder(EchoEnv):
    """EchoEnv that keeps what its game was handed, and whose task and reply it sets."""

    def __init__(self, task: str = "Say it.", reply: str = "Wrong.", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.task, self.reply, self.seen = task, reply, ""

    def _new_episode(self, options: dict | None) -> str:
        super()._new_episode(options)
        return self.task

    def _play(self, action: str) -> Outcome:
        self.seen = action
        return Outcome(self.reply, action_valid=False)


def test_a_long_action_is_cut_before_the_game_reads_it_and_the_agent_is_told() -> None:
    env = Recorder()
    env.max_action_chars = 10
    env.reset(seed=0)
    observation, _, _, _, info = env.step("0123456789abcdef")
    assert env.seen == "0123456789"
    assert observation == "[Your action was 16 characters long; only the first 10 were read.]\nWrong."
    assert info["action_cut"] == 16
    _, _, _, _, info = env.step("0123456789")
    assert env.seen == "0123456789" and "action_cut" not in info


def test_the_action_cap_defaults_to_max_action_chars_and_sizes_the_action_space() -> None:
    env = Recorder()
    assert env.max_action_chars == MAX_ACTION_CHARS
    assert env.action_space.max_length == MAX_ACTION_CHARS
    env.reset(seed=0)
    env.step("x" * MAX_ACTION_CHARS)
    assert len(env.seen) == MAX_ACTION_CHARS

    class Short(TextEnv):
        def _new_episode(self, options: dict | None) -> str:
            return "Say anything."

        def _play(self, action: str) -> Outcome:
            return Outcome(f"{len(action)} read.")

        def _describe(self) -> str:
            return "Say anything."

    short = Short(max_turns=1, max_action_chars=100)
    assert (short.max_action_chars, short.action_space.max_length) == (100, 100)
    short.reset(seed=0)
    assert short.step("y" * 101)[0].endswith("only the first 100 were read.]\n100 read.")
    with pytest.raises(ConfigError, match="max_action_chars must be at least 1, got 0"):
        Short(max_turns=1, max_action_chars=0)


def test_the_game_is_handed_valid_utf8_and_control_characters_unchanged() -> None:
    env = Recorder()
    env.reset(seed=0)
    env.step("<answer>\ud800 \x00\x1b[31m \ud83d\ude00 \udfff</answer>")
    assert env.seen == "<answer>\ufffd \x00\x1b[31m \U0001f600 \ufffd</answer>"


def test_observations_are_valid_utf8_whatever_the_game_writes() -> None:
    env = Recorder(task="task \udfff", reply="you said \ud800")
    observation, _ = env.reset(seed=0)
    assert observation == "task \ufffd"
    observation = env.step("x")[0]
    assert observation == "you said \ufffd"
    observation.encode("utf-8")


def test_utf8_safe_and_cut_action() -> None:
    text = "plain ascii"
    assert utf8_safe(text) is text
    assert utf8_safe("é \ud800\ud800 \ud83d\ude00") == "é \ufffd\ufffd \U0001f600"
    assert cut_action("abc", 3) == ("abc", None)
    # A cut through a surrogate pair leaves half a character: it becomes U+FFFD.
    assert cut_action("ab\ud83d\ude00", 3) == (
        "ab\ufffd", "[Your action was 4 characters long; only the first 3 were read.]")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_turns": 0}, "max_turns must be at least 1, got 0"),
        ({"max_turns": 2.5}, "max_turns must be an integer"),
        ({"format_penalty": -1}, "format_penalty must be at least 0"),
        ({"format_penalty": float("nan")}, "format_penalty must be a number, got nan"),
        ({"render_mode": "rgb_array"}, "render_mode must be one of"),
    ],
)
def test_bad_config_is_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EchoEnv(**kwargs)


def test_check_number_rejects_bools_and_out_of_range() -> None:
    with pytest.raises(ConfigError, match="flag must be an integer, got True"):
        check_number("flag", True)
    with pytest.raises(ConfigError, match="at most 3"):
        check_number("n", 4, maximum=3)
    check_number("p", 0.5, minimum=0, maximum=1, integer=False)


def test_a_game_must_implement_the_abstract_methods() -> None:
    class Half(TextEnv):
        def _describe(self) -> str:
            return ""

    with pytest.raises(TypeError, match="abstract"):
        Half(max_turns=1)  # type: ignore[abstract]

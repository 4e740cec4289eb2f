"""Noisy expert demonstrations (DART): random moves played and kept in context, never imitated."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.rollout import NoisyExpert, PlayOnly
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.experts import expert_policy
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.rows import TrajectoryRow
from agentgym.rollout.storage import read_rows

SOKOBAN = "Sokoban-LLM-v0"


def learned_spans(row: TrajectoryRow) -> list[tuple[int, int]]:
    """(start, end) of the turns the row teaches: its listed turns with sampled tokens (the random
    moves are listed too, masked 0); together they cover exactly the mask's ones."""
    assert len(row.turns) == row.num_turns  # every move played is listed, learned or not
    spans = [(t.start, t.end) for t in row.turns if any(row.completion_mask[t.start:t.end])]
    assert sum(end - start for start, end in spans) == sum(row.completion_mask)
    return spans


def _play(config: RolloutConfig, policy: object, renderer: ChatRenderer) -> list[TrajectoryRow]:
    return asyncio.run(EnvManager(config, policy, renderer=renderer).run())


def _noisy(noise: float, seed: int = 0) -> NoisyExpert:
    return NoisyExpert(expert_policy(SOKOBAN), noise, seed=seed)


def _replayed_labels(row: TrajectoryRow, **kwargs: object) -> list[tuple[str, str]]:
    """(move played, the expert's move from that position) for every turn, replayed in a fresh env."""
    env = agentgym.make(SOKOBAN, **kwargs)
    observation, _ = env.reset(seed=row.seed)
    expert = expert_policy(SOKOBAN)
    pairs = []
    for message in row.messages:
        if message.role == "assistant":
            pairs.append((message.content, expert.act(observation, env.unwrapped)))
            observation, *_ = env.step(message.content)
    return pairs


def test_noise_zero_records_exactly_the_expert(renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id=SOKOBAN, episodes=4, seed=11)
    clean = _play(config, expert_policy(SOKOBAN), renderer)
    noisy = _play(config, _noisy(0.0), renderer)
    for a, b in zip(clean, noisy, strict=True):
        assert (a.completion_ids, a.completion_mask, a.messages) == (b.completion_ids, b.completion_mask, b.messages)


def test_random_moves_are_played_but_only_the_experts_moves_are_learned(renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id=SOKOBAN, episodes=16, seed=5)
    rows = _play(config, _noisy(0.4, seed=1), renderer)
    assert all(row.success and row.error is None for row in rows)
    played = learned = 0
    for row in rows:
        # The tokens are the whole conversation, masked turns included (the model reads them).
        assert renderer.decode(row.prompt_ids + row.completion_ids) == renderer.tokenizer.apply_chat_template(
            [m.model_dump() for m in row.messages[:-1]], add_generation_prompt=False, tokenize=False)
        spans = learned_spans(row)
        learned_moves = [renderer.tokenizer.decode(row.completion_ids[start:end], skip_special_tokens=True)
                         for start, end in spans]
        # Every learned turn is the expert's move from the position it was played in.
        experts_turns = iter(played for played, label in _replayed_labels(row) if played == label)
        assert all(move in experts_turns for move in learned_moves)  # in order: a subsequence
        played += row.num_turns
        learned += len(spans)
    # Seeded, so these counts are fixed; the share is near the noise asked for.
    assert 0.25 < 1 - learned / played < 0.45


class _UncheckedNoise(NoisyExpert):
    """What NoisyExpert would do without its check: any random move."""

    def _recoverable_random_move(self, env: object) -> str:
        return env.random_action(self.rng)


def test_a_random_move_never_leaves_a_position_the_expert_cannot_solve(renderer: ChatRenderer) -> None:
    """Noise 0.9 on 2-box levels pushes boxes about most turns. Unchecked, some land in a
    corner and the expert has no move left (an error row); checked, that never happens."""
    config = RolloutConfig(env_id=SOKOBAN, env_kwargs={"num_boxes": 2}, episodes=12, seed=21, max_turns=40)
    unchecked = _play(config, _UncheckedNoise(expert_policy(SOKOBAN), 0.9, seed=3), renderer)
    assert any(row.error is not None and "no solution" in row.error for row in unchecked)
    rows = _play(config, _noisy(0.9, seed=3), renderer)
    assert all(row.error is None for row in rows)
    for row in rows:
        _replayed_labels(row, num_boxes=2, max_turns=40)  # the expert has a move from every position reached (else PolicyError)
    masked = sum(row.num_turns - len(learned_spans(row)) for row in rows)
    assert masked > 0.5 * sum(row.num_turns for row in rows)


def test_the_noise_repeats_whatever_order_episodes_run_in(renderer: ChatRenderer) -> None:
    one_at_a_time = RolloutConfig(env_id=SOKOBAN, episodes=6, seed=2, concurrency=1)
    all_at_once = RolloutConfig(env_id=SOKOBAN, episodes=6, seed=2, concurrency=6)
    first = _play(one_at_a_time, _noisy(0.5, seed=4), renderer)
    second = _play(all_at_once, _noisy(0.5, seed=4), renderer)
    assert {r.episode_id: r.completion_mask for r in first} == {r.episode_id: r.completion_mask for r in second}
    other = _play(all_at_once, _noisy(0.5, seed=5), renderer)
    assert {r.episode_id: r.messages for r in other} != {r.episode_id: r.messages for r in second}


def test_play_only_is_text_everywhere() -> None:
    action = PlayOnly("<answer>Up</answer>")
    assert action == "<answer>Up</answer>" and isinstance(action, str) and str(action) == action


@pytest.mark.parametrize("noise", [-0.1, 1.0, 2.0])
def test_a_noise_that_is_not_a_probability_below_one_is_refused(noise: float) -> None:
    with pytest.raises(ConfigError, match=f"probability below 1.*got {noise}"):
        _noisy(noise)


def test_the_cli_writes_noisy_demos_and_refuses_noise_without_the_solver(tmp_path) -> None:
    runner = CliRunner()
    out = tmp_path / "demos.parquet"
    result = runner.invoke(app, ["rollout", "--env", SOKOBAN, "--policy", "solver", "--expert-noise", "0.5",
                                 "--episodes", "4", "--show", "0", "--out", str(out)], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert all(row.success for row in rows)
    assert sum(len(learned_spans(row)) for row in rows) < sum(row.num_turns for row in rows)

    for args, message in ((["--policy", "random", "--expert-noise", "0.2"], "needs --policy solver"),
                          (["--policy", "solver", "--expert-noise", "1"], "probability below 1")):
        result = runner.invoke(app, ["rollout", "--env", SOKOBAN, "--episodes", "1", *args], terminal_width=300)
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output

"""DAgger: a model plays, the expert labels its turns; its mistakes are played but never learned.

The "model" is the stub server, which always answers ``<answer>Up</answer>``:
a policy whose every move is known, so each turn's verdict can be checked
against the expert replayed from the same position.
"""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.rollout import ExpertCorrection
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.experts import expert_policy
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import PlayOnly, RandomPolicy, expert_can_go_on
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.rollout.rows import TrajectoryRow
from agentgym.serve.stub import StubServer

SOKOBAN = "Sokoban-LLM-v0"
UP = "<answer>Up</answer>"


def learned_spans(row: TrajectoryRow) -> list[tuple[int, int]]:
    """(start, end) of the turns the row teaches: its listed turns with sampled tokens (played-only
    turns are listed too, masked 0); together they cover exactly the mask's ones."""
    spans = [(t.start, t.end) for t in row.turns if any(row.completion_mask[t.start:t.end])]
    assert sum(end - start for start, end in spans) == sum(row.completion_mask)
    return spans


def _play(config: RolloutConfig, stub: StubServer, renderer: ChatRenderer, model_share: float,
          seed: int = 0) -> list[TrajectoryRow]:
    teacher = ExpertCorrection(expert_policy(SOKOBAN), model_share, seed=seed)

    async def main() -> list[TrajectoryRow]:
        async with OpenAIPolicy(stub.base_url, "stub") as policy:
            return await EnvManager(config, policy, renderer=renderer, teacher=teacher).run()

    return asyncio.run(main())


def _turns(row: TrajectoryRow, renderer: ChatRenderer, **kwargs: object) -> list[tuple[str, str, bool]]:
    """(move played, the expert's move from that position, learned?) for every turn,
    replayed in a fresh env; raises PolicyError if the expert had no move somewhere."""
    env = agentgym.make(SOKOBAN, **kwargs)
    observation, _ = env.reset(seed=row.seed)
    expert = expert_policy(SOKOBAN)
    learned = [renderer.tokenizer.decode(row.completion_ids[start:end], skip_special_tokens=True)
               for start, end in learned_spans(row)]
    turns, next_learned = [], 0
    for message in (m for m in row.messages if m.role == "assistant"):
        is_learned = next_learned < len(learned) and learned[next_learned] == message.content
        # a learned span is always the move played at that turn, so spans and turns line up in order
        next_learned += is_learned
        turns.append((message.content, expert.act(observation, env.unwrapped), is_learned))
        observation, *_ = env.step(message.content)
    assert next_learned == len(learned), "a learned span is not a move that was played"
    return turns


def test_every_learned_turn_is_the_experts_move_and_every_wrong_move_is_masked(
        stub: StubServer, renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id=SOKOBAN, episodes=12, seed=3, max_turns=30)
    rows = _play(config, stub, renderer, model_share=0.5, seed=1)
    assert all(row.error is None for row in rows)
    kinds = {"model right": 0, "model wrong, played": 0, "expert's correction": 0}
    for row in rows:
        for played, label, learned in _turns(row, renderer, max_turns=30):
            assert learned == (played == label)  # learned exactly when it is the expert's move
            if played != label:
                assert played == UP  # the only move played but not learned is the model's
                kinds["model wrong, played"] += 1
            else:
                kinds["model right" if played == UP else "expert's correction"] += 1
    assert all(count > 0 for count in kinds.values()), kinds
    # The model's own sampled tokens are kept where it was right; a row with the
    # expert's text in it says so (its logprobs are not all the server's).
    assert any(row.retokenized for row in rows)


def test_share_zero_plays_the_expert_wherever_the_model_is_wrong(stub: StubServer, renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id=SOKOBAN, episodes=6, seed=7)
    rows = _play(config, stub, renderer, model_share=0.0)
    assert all(row.success for row in rows)
    for row in rows:
        turns = _turns(row, renderer)
        assert all(played == label and learned for played, label, learned in turns)


def test_a_wrong_move_that_would_strand_a_box_is_replaced_by_the_experts() -> None:
    """Even at share 1 (play every wrong move), a move after which the level cannot be
    solved is not played: the expert's is, so every position reached has a label."""
    expert = expert_policy(SOKOBAN)
    teacher = ExpertCorrection(expert, model_share=1.0)
    stranding = wrong = 0
    for seed in range(60):
        env = agentgym.make(SOKOBAN, num_boxes=2)
        env.reset(seed=seed)
        game = env.unwrapped
        label = expert.act("", game)
        for action in (game.format_action(move) for move in ("Up", "Down", "Left", "Right")):
            if action == label:
                assert teacher.review(action, game) is None  # right: stands, learned
            elif not expert_can_go_on(expert, game, action):
                stranding += 1
                assert teacher.review(action, game) == label
            else:
                wrong += 1
                verdict = teacher.review(action, game)
                assert isinstance(verdict, PlayOnly) and verdict == action
    assert stranding > 0 and wrong > 0


def test_the_corrections_repeat_whatever_order_episodes_run_in(stub: StubServer, renderer: ChatRenderer) -> None:
    one = _play(RolloutConfig(env_id=SOKOBAN, episodes=6, seed=2, concurrency=1), stub, renderer, 0.5, seed=4)
    many = _play(RolloutConfig(env_id=SOKOBAN, episodes=6, seed=2, concurrency=6), stub, renderer, 0.5, seed=4)
    assert {r.episode_id: r.messages for r in one} == {r.episode_id: r.messages for r in many}


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_share_that_is_not_a_probability_is_refused(share: float) -> None:
    with pytest.raises(ConfigError, match=f"probability in \\[0, 1\\], got {share}"):
        ExpertCorrection(expert_policy(SOKOBAN), share)


def test_a_teacher_needs_a_model_policy() -> None:
    with pytest.raises(ConfigError, match="needs a model policy"):
        EnvManager(RolloutConfig(env_id=SOKOBAN), RandomPolicy(0),
                   teacher=ExpertCorrection(expert_policy(SOKOBAN), 0.5))


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "solver", "--dagger", "0.5"], "needs --policy model"),
    (["--dagger", "0.5", "--ray", "local"], "drop --ray"),
    (["--dagger", "2"], "probability in [0, 1]"),
])
def test_the_cli_refuses_dagger_where_it_cannot_work(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["rollout", "--env", SOKOBAN, "--episodes", "1", *args], terminal_width=300)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_the_cli_refuses_dagger_on_an_env_without_an_expert_before_starting_a_server() -> None:
    result = CliRunner().invoke(app, ["rollout", "--env", "Wordle-LLM-v0", "--dagger", "0.5", "--episodes", "1"],
                                terminal_width=300)
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "has no expert policy" in output and "Starting the built-in server" not in output

"""The reward model (``--trainer rm``): its loss on numbers worked by hand, the held-out split, steps on
both backends (the same step), and a run whose final/ scores as training did."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.learners.rm import RewardModelLearner, ScoredPair, episode_tokens, hold_out_groups
from agentgym.trainers.losses.preference import reward_model_loss
from agentgym.trainers.settings import TrainConfig
from trainer_helpers import learn, make_learner

# -- the loss --------------------------------------------------------------------------------------


def test_the_bradley_terry_loss_of_a_fixed_pair() -> None:
    # Scores 1.0 (chosen) and 0.2 (rejected): margin 0.8, loss = -log sigmoid(0.8) = log(1 + e^-0.8)
    # = log(1.449329) = 0.371101. With center 0.01: + 0.01 * (1.0 + 0.2)^2 = 0.0144 -> 0.385501 (TRL's
    # center_rewards_coefficient term).
    loss, margin = reward_model_loss(torch.tensor([1.0]), torch.tensor([0.2]))
    assert margin.item() == pytest.approx(0.8)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.8)), abs=1e-6)
    assert loss.item() == pytest.approx(0.371101, abs=1e-6)
    centred, _ = reward_model_loss(torch.tensor([1.0]), torch.tensor([0.2]), center_coefficient=0.01)
    assert centred.item() == pytest.approx(0.385501, abs=1e-6)


def test_the_loss_pushes_the_chosen_score_up_and_the_rejected_down() -> None:
    chosen, rejected = torch.tensor([1.0], requires_grad=True), torch.tensor([0.2], requires_grad=True)
    loss, _ = reward_model_loss(chosen, rejected)
    loss.sum().backward()
    # d/dm -log sigmoid(m) = -sigmoid(-m) = -1 / (1 + e^0.8) = -0.310026
    assert chosen.grad.item() == pytest.approx(-0.310026, abs=1e-6)
    assert rejected.grad.item() == pytest.approx(0.310026, abs=1e-6)


# -- the held-out groups and what an episode reads as ------------------------------------------------


def _group(make_row: Any, answers: list[tuple[str, float]], group: int) -> list[Any]:
    return [make_row(answer, reward=reward, group=group, index=index, seed=group, prompt=f"Task {group}.")
            for index, (answer, reward) in enumerate(answers)]


_GOOD_BAD = [("<answer>Dragon</answer>", 1.0), ("<answer>Phoenix</answer>", 0.0)]


def test_a_fraction_of_whole_groups_is_held_out_by_the_seed(make_row: Any) -> None:
    rows = [row for group in range(10) for row in _group(make_row, _GOOD_BAD, group)]
    train, held = hold_out_groups(rows, 0.2, seed=0)
    assert len(held) == 4 and len(train) == 16  # 2 of 10 groups, both episodes of each
    assert len({row.group_id for row in held}) == 2 and not {r.group_id for r in held} & {r.group_id for r in train}
    assert hold_out_groups(rows, 0.2, seed=0) == (train, held)  # the same split on every rank and resume
    assert hold_out_groups(rows, 0.0, seed=0) == (rows, [])
    assert len(hold_out_groups(rows[:4], 0.01, seed=0)[1]) == 2  # at least one group when asked, never all
    assert len(hold_out_groups(rows[:4], 0.99, seed=0)[0]) == 2


def test_an_episode_is_its_conversation_up_to_its_last_action(make_row: Any, tiny_renderer: Any) -> None:
    from agentgym.rollout.rows import Message

    tokenizer = tiny_renderer.tokenizer
    bare = make_row()
    assert episode_tokens([bare], tokenizer) == bare.prompt_ids + bare.completion_ids  # no messages: its tokens
    said = [Message(role="system", content="Pick."), Message(role="user", content="Arms?"),
            Message(role="assistant", content="Dragon"), Message(role="user", content="You won!")]
    expected = tokenizer.apply_chat_template([m.model_dump() for m in said[:3]], tokenize=True, return_dict=False)
    assert episode_tokens([bare.model_copy(update={"messages": said})], tokenizer) == list(expected)


# -- steps -------------------------------------------------------------------------------------------


def _learner(backend: str, tmp_path: Path, **settings: Any) -> RewardModelLearner:
    config = TrainConfig.from_dict({"trajectories": "unused.parquet", "trainer": "rm", "backend": backend,
                                    "out": str(tmp_path / backend), "model": "tiny", "micro_batch_size": 2, "group_size": 2,
                                    **settings})
    return make_learner(RewardModelLearner, config, Dist())


def _scores(learner: RewardModelLearner, pair: ScoredPair) -> tuple[float, float]:
    with torch.no_grad():
        chosen, rejected = learner.engine.scores([pair.chosen, pair.rejected]).tolist()
    return chosen, rejected


def test_steps_score_the_chosen_above_the_rejected(make_row: Any, tmp_path: Path) -> None:
    rows = [row for group in range(3) for row in _group(make_row, _GOOD_BAD, group)]
    learner = _learner("fsdp", tmp_path, lr=1e-3, episodes_per_step=6)
    learner.held_out = learner.scored_pairs(_group(make_row, _GOOD_BAD, 7))[0]
    pairs, _ = learner.scored_pairs(rows)
    margins = [chosen - rejected for chosen, rejected in (_scores(learner, pair) for pair in pairs)]
    first = learn(learner, rows)
    assert first["pairs"] == 3 and first["updates"] == 1.0
    # measured before the update: the mean loss of the untrained head's own scores
    assert first["loss"] == pytest.approx(sum(math.log(1 + math.exp(-m)) for m in margins) / 3, rel=1e-5)
    for _ in range(4):
        last = learn(learner, rows)
    assert last["accuracy"] == 1.0 and last["margin"] > 0 and last["loss"] < first["loss"]
    assert last["eval_pairs"] == 1 and last["eval_accuracy"] == 1.0  # a pair never trained on
    after = _scores(learner, pairs[0])
    assert after[0] - after[1] > margins[0]


def test_a_step_with_no_pair_takes_no_update_and_says_why(make_row: Any, tmp_path: Path) -> None:
    learner = _learner("fsdp", tmp_path)
    metrics = learn(learner, _group(make_row, [("<answer>Dragon</answer>", 0.5), ("x", 0.5)], 0))
    assert metrics["pairs"] == 0 and metrics["updates"] == 0.0 and "loss" not in metrics
    assert learner.idle_reason(metrics).startswith("no pair: in each of the 1 groups")


def test_rm_needs_a_file_and_takes_no_lora(tmp_path: Path) -> None:
    from agentgym.trainers.registry import check_settings

    with pytest.raises(ConfigError, match="--trainer rm learns from recorded pairs: pass --trajectories"):
        check_settings(TrainConfig.from_dict({"trainer": "rm", "env_id": "Bandit-LLM-v0", "model": "tiny"}))
    with pytest.raises(ConfigError, match="leave out -s lora"):
        check_settings(TrainConfig.from_dict({"trainer": "rm", "trajectories": "x.parquet", "lora": True}))
    with pytest.raises(ConfigError, match="rollout.temperature is set, but trainer 'rm'"):
        check_settings(TrainConfig.from_dict({"trainer": "rm", "trajectories": "x.parquet", "temperature": 0.5}))


@pytest.mark.parametrize("center", [0.0, 0.05])
def test_fsdp_and_trl_take_the_same_rm_step(make_row: Any, tmp_path: Path, center: float) -> None:
    """One SGD step at lr 1, no clipping: the weight deltas are the gradients; agentgym's loss (fsdp) and
    TRL's RewardTrainer.compute_loss (trl) agree, pairs of unequal lengths in one pass."""
    from unittest import mock

    from trl import RewardTrainer

    rows = (_group(make_row, _GOOD_BAD, 0) + _group(make_row, [("<answer>Phoenix, the long way</answer>", 0.9),
                                                               ("no", 0.1)], 1)
            + _group(make_row, [("x", 0.2), ("<answer>Dragon</answer>", 0.7)], 2))
    deltas, metrics = {}, {}
    for backend in ("fsdp", "trl"):
        learner = _learner(backend, tmp_path, optimizer="sgd", lr=1.0, max_grad_norm=0.0, lr_schedule="constant",
                           episodes_per_step=6, center_rewards_coefficient=center)
        model = learner.engine.policy()
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        with mock.patch.object(RewardTrainer, "compute_loss", autospec=True,
                               side_effect=RewardTrainer.compute_loss) as trl:
            metrics[backend] = learn(learner, rows)
        assert trl.call_count == (2 if backend == "trl" else 0)  # micro-batches of 2 pairs: 3 pairs, 2 passes
        deltas[backend] = torch.cat([(p.detach() - before[n]).flatten() for n, p in model.named_parameters()])
    assert metrics["fsdp"]["pairs"] == metrics["trl"]["pairs"] == 3
    assert metrics["fsdp"]["loss"] == pytest.approx(metrics["trl"]["loss"], rel=1e-5)
    assert metrics["fsdp"]["grad_norm"] == pytest.approx(metrics["trl"]["grad_norm"], rel=1e-5)
    assert metrics["fsdp"]["grad_norm"] > 0
    scale = float(deltas["fsdp"].abs().max())
    assert scale > 0 and torch.allclose(deltas["fsdp"], deltas["trl"], rtol=1e-5, atol=1e-6 * scale)


# -- a run -------------------------------------------------------------------------------------------

_PAIRS = [{"prompt": f"Task {n}: pick an arm. ", "chosen": "<answer>Dragon</answer>",
           "rejected": "<answer>Phoenix</answer>"} for n in range(6)]


@pytest.mark.parametrize("backend", ["fsdp", "trl"])
def test_a_run_s_final_model_loads_as_a_sequence_classifier_and_scores_as_training_did(
        tmp_path: Path, backend: str) -> None:
    from transformers import AutoModelForSequenceClassification

    from agentgym.trainers.loop.run import train

    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(pair) + "\n" for pair in _PAIRS), encoding="utf-8")
    config = TrainConfig.from_dict({"trainer": "rm", "backend": backend, "trajectories": str(path), "model": "tiny",
                                    "steps": 3, "episodes_per_step": 4, "group_size": 2, "lr": 1e-3, "eval_fraction": 0.2,
                                    "out": str(tmp_path / "run")})
    result = train(config)
    assert [m["pairs"] for m in result.metrics] == [2, 2, 2]  # 5 of the 6 pairs train, two a step
    assert all(m["eval_pairs"] == 1 for m in result.metrics)
    assert result.final_model is not None
    model = AutoModelForSequenceClassification.from_pretrained(result.final_model).eval()
    assert model.config.num_labels == 1 and model.config.pad_token_id is not None
    learner = make_learner(RewardModelLearner, config.updated({"model": str(result.final_model),
                                                               "out": str(tmp_path / "again")}), Dist())
    pairs = learner.scored_pairs(learner.read_recorded(str(path)))[0]
    ids = [list(pairs[0].chosen), list(pairs[0].rejected)]
    with torch.no_grad():
        trained = learner.engine.scores(ids)
        loaded = torch.cat([model(input_ids=torch.tensor([one])).logits.squeeze(-1) for one in ids])
    assert torch.allclose(trained, loaded, atol=1e-5)
    assert not torch.allclose(trained, torch.zeros(2))
    if backend == "fsdp":  # `agentgym export` of its checkpoint: the same sequence classifier
        from agentgym.trainers.loop.checkpoint import export_checkpoint, find_checkpoint

        exported = export_checkpoint(find_checkpoint(tmp_path / "run"), tmp_path / "exported")
        again = AutoModelForSequenceClassification.from_pretrained(exported).eval()
        with torch.no_grad():
            assert float(again(input_ids=torch.tensor([ids[0]])).logits) == pytest.approx(float(loaded[0]), abs=1e-5)


def test_the_closing_lines_of_an_rm_run_give_its_accuracy_and_how_to_train_against_it(tmp_path: Path) -> None:
    """Not the recorded episodes' success, nor `rollout --model` of a model that scores rather than plays."""
    from typer.testing import CliRunner

    from agentgym.cli import app

    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(pair) + "\n" for pair in _PAIRS), encoding="utf-8")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "--trainer", "rm", "--trajectories", str(path), "--model", "tiny",
                                      "--steps", "2", "--episodes-per-step", "4", "--group-size", "2", "--lr", "1e-3",
                                      "-s", "eval_fraction=0.2", "--out", str(out)], terminal_width=300)
    assert result.exit_code == 0, result.output
    text = "".join(result.output.split())  # the console wraps long lines
    assert "Held-outpairaccuracy" in text and "(step1)->" in text and "on1pairs." in text
    assert f"trainagainstit:agentgymtrain--envrm:ENV-kreward_model={out / 'final'}" in text
    assert "Successrate" not in text and "rollitout" not in text

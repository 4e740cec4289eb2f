"""DPO (``--trainer dpo``): the loss on numbers worked by hand, the pairs a group gives, and runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.engines.distributed import Dist
from trainer_helpers import learn, make_learner
from agentgym.trainers.learners.dpo import DPOLearner, Pair, pair_file_rows, preference_pairs
from agentgym.trainers.losses.preference import dpo_loss
from agentgym.trainers.settings import TrainConfig

# -- the loss --------------------------------------------------------------------------------------


def test_the_sigmoid_loss_of_a_fixed_pair() -> None:
    # chosen: policy -1, reference -2 -> log-ratio +1; rejected: policy -3, reference -2 -> -1.
    # h = 1 - (-1) = 2; beta 0.5 -> margin 1.0; loss = -log sigmoid(1) = log(1 + e^-1) = 0.3132617.
    loss, margin = dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]),
                            beta=0.5)
    assert margin.item() == pytest.approx(1.0)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-6)
    assert loss.item() == pytest.approx(0.3132617, abs=1e-6)


def test_the_ipo_loss_of_a_fixed_pair_is_per_token() -> None:
    # The same log-ratios, +1 over 2 chosen tokens and -1 over 4 rejected ones:
    # h' = 1/2 - (-1/4) = 0.75; 1 / (2 beta) = 1 -> loss = (0.75 - 1)^2 = 0.0625.
    loss, margin = dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]),
                            beta=0.5, kind="ipo", chosen_tokens=torch.tensor([2.0]),
                            rejected_tokens=torch.tensor([4.0]))
    assert loss.item() == pytest.approx(0.0625)
    assert margin.item() == pytest.approx(1.0)  # the implicit rewards' margin is the summed one either way


def test_the_loss_pushes_the_chosen_up_and_the_rejected_down() -> None:
    chosen, rejected = torch.tensor([-1.0], requires_grad=True), torch.tensor([-1.0], requires_grad=True)
    loss, _ = dpo_loss(chosen, rejected, torch.tensor([-1.0]), torch.tensor([-1.0]), beta=1.0)
    loss.sum().backward()
    # at h = 0: d/dh -log sigmoid(h) = -sigmoid(-h) = -0.5
    assert chosen.grad.item() == pytest.approx(-0.5)
    assert rejected.grad.item() == pytest.approx(0.5)


# -- which episodes pair up ------------------------------------------------------------------------


def _group(make_row: Any, rewards: list[float], group: int) -> list[Any]:
    return [make_row(reward=reward, group=group, index=index, seed=group) for index, reward in enumerate(rewards)]


def test_best_against_worst_and_every_pair_above_the_margin(make_row: Any) -> None:
    rows = _group(make_row, [0.2, 1.0, 0.5], 0) + _group(make_row, [0.3, 0.3], 1)
    e = [row.episode_id for row in rows]
    pairs, without = preference_pairs(rows, "best_worst")
    assert pairs == [Pair(e[1], e[0])] and without == 1  # group 1's rewards tie: no pair
    pairs, _ = preference_pairs(rows, "all")
    assert pairs == [Pair(e[1], e[2]), Pair(e[1], e[0]), Pair(e[2], e[0])]
    pairs, without = preference_pairs(rows, "all", margin=0.4)  # 0.8 and 0.5 clear it, 0.3 does not
    assert pairs == [Pair(e[1], e[2]), Pair(e[1], e[0])] and without == 1


def test_an_episode_split_into_two_rows_pairs_once(make_row: Any) -> None:
    first = make_row(reward=1.0, index=0)
    second = make_row(reward=1.0, index=0, row_index=1, prompt="Turn two.")
    other = make_row(reward=0.0, index=1)
    pairs, _ = preference_pairs([first, second, other])
    assert pairs == [Pair(first.episode_id, other.episode_id)]


# -- a step ----------------------------------------------------------------------------------------


def _learner(backend: str, tmp_path: Path, **settings: Any) -> DPOLearner:
    config = TrainConfig.from_dict({"trajectories": "unused.parquet", "trainer": "dpo", "backend": backend,
                                    "out": str(tmp_path / backend), "model": "tiny", "micro_batch_size": 1,
                                    **settings})
    learner = make_learner(DPOLearner, config, Dist())
    learner.engine.keep_reference(learner.engine.model_path)
    return learner


def _sequence_logprob(learner: DPOLearner, row: Any) -> float:
    from agentgym.trainers.engines.batch import collate, to_sequences

    batch = collate(to_sequences([row], [0.0]), pack=learner.engine.packs, pad_id=learner.engine.pad_id)
    with torch.no_grad():
        logprobs, _ = learner.engine.logprobs(batch)
    return float((logprobs.detach() * batch.loss_mask).sum())


def test_steps_raise_the_chosen_over_the_rejected(make_row: Any, tmp_path: Path) -> None:
    chosen = make_row("<answer>Dragon</answer>", reward=1.0, index=0)
    rejected = make_row("<answer>Phoenix</answer>", reward=0.0, index=1)
    learner = _learner("fsdp", tmp_path, lr=1e-3)
    start = _sequence_logprob(learner, chosen) - _sequence_logprob(learner, rejected)
    first = learn(learner, [chosen, rejected])
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference: h = 0
    assert first["reward_margin"] == pytest.approx(0.0, abs=1e-6) and first["pairs"] == 1
    for _ in range(3):
        last = learn(learner, [chosen, rejected])
    assert _sequence_logprob(learner, chosen) - _sequence_logprob(learner, rejected) > start + 1.0
    assert last["reward_margin"] > 0 and last["reward_accuracy"] == 1.0 and last["loss"] < math.log(2)


def test_a_step_with_no_pair_takes_no_update_and_says_why(make_row: Any, tmp_path: Path) -> None:
    learner = _learner("fsdp", tmp_path)
    metrics = learn(learner, _group(make_row, [0.5, 0.5], 0))
    assert metrics["pairs"] == 0 and metrics["unpaired_groups"] == 1 and metrics["updates"] == 0.0
    assert "loss" not in metrics and learner.engine.optimizer_steps == 0 and learner.version == 0
    assert learner.idle_reason(metrics) == ("no pair: in each of the 1 groups the rewards were within pair_margin (0) "
                                            "of each other")


def test_mini_batches_and_epochs_are_dpo_updates(make_row: Any, tmp_path: Path) -> None:
    """Four pairs, mini_batches 2, epochs 2: four updates of two pairs (one a step before, whatever the
    settings said); each pair measured once, before its first update."""
    rows = [row for group in range(4) for row in _group(make_row, [1.0, 0.0], group)]
    learner = _learner("fsdp", tmp_path, lr=1e-3, mini_batches=2, epochs=2, episodes_per_step=8, group_size=2)
    metrics = learn(learner, rows)
    assert metrics["updates"] == 4.0 and learner.engine.optimizer_steps == 4 and metrics["pairs"] == 4
    assert metrics["loss"] == pytest.approx(math.log(2), abs=1e-5)  # measured before each pair's update


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sigmoid", "ipo"])
def test_fsdp_and_trl_take_the_same_dpo_step(make_row: Any, tmp_path: Path, kind: str) -> None:
    """One SGD step at lr 1, no clipping: the weight deltas are the gradients; agentgym's loss (fsdp) and
    TRL's DPOTrainer (trl) agree, on one-row episodes and on a pair whose episode spans two rows."""
    from unittest import mock

    from trl import DPOTrainer

    rows = _group(make_row, [1.0, 0.0, 0.4], 0)
    long = make_row("<answer>Phoenix and a longer tail</answer>", reward=0.9, group=1, index=0, seed=1)
    rows += [long, make_row(reward=0.1, group=1, index=1, seed=1)]
    # an episode of two rows (past the context limit): trl sums its rows as fsdp does, not through DPOTrainer
    rows += [make_row(reward=1.0, group=2, index=0, seed=2),
             make_row("<answer>Dragon</answer>", reward=1.0, group=2, index=0, seed=2, row_index=1, prompt="Again."),
             make_row(reward=0.0, group=2, index=1, seed=2)]
    deltas, metrics = {}, {}
    for backend in ("fsdp", "trl"):
        learner = _learner(backend, tmp_path, optimizer="sgd", lr=1.0, max_grad_norm=0.0, lr_schedule="constant",
                           micro_batch_size=1, pairs="all", dpo_loss=kind)
        model = learner.engine.policy()
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        with mock.patch.object(DPOTrainer, "compute_loss", autospec=True, side_effect=DPOTrainer.compute_loss) as trl:
            metrics[backend] = learn(learner, rows)
        assert trl.call_count == (4 if backend == "trl" else 0)  # one call a one-row pair (micro-batches of 1)
        deltas[backend] = torch.cat([(p.detach() - before[n]).flatten() for n, p in model.named_parameters()])
    assert metrics["fsdp"]["pairs"] == metrics["trl"]["pairs"] == 5
    assert metrics["fsdp"]["loss"] == pytest.approx(metrics["trl"]["loss"], rel=1e-5)
    assert metrics["fsdp"]["grad_norm"] == pytest.approx(metrics["trl"]["grad_norm"], rel=1e-5)
    assert metrics["fsdp"]["grad_norm"] > 0
    # trl's loss is TRL's DPOTrainer.compute_loss, whose fused LM head sums in float32 in its own order:
    # the deltas agree to rounding, a millionth of the largest, plus the float32 step of the weights
    # they are the change of (the norms' weights are near 1, where a delta is read to 1.2e-7).
    scale = float(deltas["fsdp"].abs().max())
    weight_ulp = torch.finfo(torch.float32).eps * max(float(w.abs().max()) for w in before.values())
    assert torch.allclose(deltas["fsdp"], deltas["trl"], rtol=1e-4, atol=1e-6 * scale + 2 * weight_ulp)


# -- pairs files and runs --------------------------------------------------------------------------

_PAIRS = [{"prompt": "Pick an arm: ", "chosen": "<answer>Dragon</answer>", "rejected": "<answer>Phoenix</answer>"},
          {"prompt": "Choose: ", "chosen": "<answer>Dragon</answer>", "rejected": "nope"}]


def _pairs_file(tmp_path: Path, suffix: str) -> Path:
    path = tmp_path / f"pairs{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(pair) + "\n" for pair in _PAIRS), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(_PAIRS), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_pairs_file_becomes_groups_of_two(tmp_path: Path, suffix: str, tiny_renderer: Any) -> None:
    tokenizer = tiny_renderer.tokenizer
    rows = pair_file_rows(str(_pairs_file(tmp_path, suffix)), tokenizer)
    assert [(row.group_id, row.reward) for row in rows] == [(0, 1.0), (0, 0.0), (1, 1.0), (1, 0.0)]
    assert tokenizer.decode(rows[0].prompt_ids) == "Pick an arm: "
    assert tokenizer.decode(rows[1].completion_ids) == "<answer>Phoenix</answer>" + tokenizer.eos_token
    assert all(all(row.completion_mask) for row in rows)
    pairs, _ = preference_pairs(rows)
    assert pairs == [Pair(rows[0].episode_id, rows[1].episode_id), Pair(rows[2].episode_id, rows[3].episode_id)]


def test_a_file_of_neither_kind_is_one_clear_error(tmp_path: Path) -> None:
    from agentgym.trainers.loop.run import train

    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n", encoding="utf-8")
    config = TrainConfig.from_dict({"trainer": "dpo", "trajectories": str(path), "model": "tiny",
                                    "out": str(tmp_path / "run"), "steps": 1})
    with pytest.raises(ConfigError, match="neither a rollout file .* nor a pairs file"):
        train(config)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_dpo_runs_on_a_pairs_file_and_on_recorded_groups(tmp_path: Path, write_groups: Any) -> None:
    from agentgym.trainers.loop.run import train

    pairs = train(TrainConfig.from_dict({
        "trainer": "dpo", "trajectories": str(_pairs_file(tmp_path, ".jsonl")), "model": "tiny", "steps": 3,
        "episodes_per_step": 4, "group_size": 2, "lr": 1e-3, "out": str(tmp_path / "pairs-run")}))
    assert [m["pairs"] for m in pairs.metrics] == [2, 2, 2]
    assert pairs.metrics[-1]["reward_margin"] > pairs.metrics[0]["reward_margin"]
    assert (tmp_path / "pairs-run" / "reference" / "config.json").exists()  # kept for a resume
    groups = write_groups(tmp_path / "rows.parquet", [[("<answer>Dragon</answer>", 1.0), ("nope", 0.0)],
                                                      [("<answer>Phoenix</answer>", 0.3), ("x", 0.3)]])
    recorded = train(TrainConfig.from_dict({
        "trainer": "dpo", "trajectories": str(groups), "model": "tiny", "steps": 2, "episodes_per_step": 4,
        "group_size": 2,
        "out": str(tmp_path / "rows-run")}))
    assert [(m["pairs"], m["unpaired_groups"]) for m in recorded.metrics] == [(1, 1), (1, 1)]
    assert recorded.final_model is not None and (recorded.final_model / "config.json").exists()


@pytest.mark.slow
def test_dpo_online_against_bandit(tmp_path: Path) -> None:
    from agentgym.trainers.loop.run import train

    result = train(TrainConfig.from_dict({
        "trainer": "dpo", "env_id": "Bandit-LLM-v0", "model": "tiny", "steps": 2, "episodes_per_step": 8,
        "group_size": 4, "max_tokens": 8, "format_warmup_steps": 4, "out": str(tmp_path / "online")}))
    assert len(result.metrics) == 2
    assert all("episodes" in m and "pairs" in m for m in result.metrics)

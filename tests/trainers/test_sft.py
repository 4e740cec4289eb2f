"""--trainer sft: fine-tuning on the successful episodes of a rollout file, with TRL's SFTTrainer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

import agentgym
from agentgym.errors import ConfigError
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.rows import TrajectoryRow
from agentgym.rollout.storage import RolloutWriter
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.metrics import read_jsonl
from agentgym.trainers.sft import (
    freeze_parameters,
    length_grouped_order,
    load_model_and_tokenizer,
    random_batch_order,
    run_sft,
    sft_dataset,
    sft_passes,
    sft_train,
    sorted_within_batches,
    trajectory_files,
)

BANDIT = "Bandit-LLM-v0"


def _random_rows(tokenizer: Any, episodes: int, seed: int) -> list[TrajectoryRow]:
    """Episodes of Bandit's random well-formed policy: about half of them choose the best arm."""
    config = RolloutConfig(env_id=BANDIT, episodes=episodes, group_size=1, concurrency=1, seed=seed)
    return asyncio.run(EnvManager(config, RandomPolicy(seed), renderer=ChatRenderer(tokenizer)).run())


def _success_rate(model: Any, tokenizer: Any, seeds: range) -> float:
    """Greedy answers of ``model`` on fresh Bandit episodes, played by the env itself."""
    renderer = ChatRenderer(tokenizer)
    wins = 0
    for seed in seeds:
        env = agentgym.make(BANDIT)
        observation, _ = env.reset(seed=seed)
        prompt = torch.tensor([renderer.prompt_ids(env.unwrapped.instructions, observation)])
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
        wins += bool(env.step(text)[4]["success"])
    return wins / len(seeds)


@pytest.fixture(scope="module")
def tokenizer(tiny_model: str) -> Any:
    return load_model_and_tokenizer(tiny_model)[1]


def test_dataset_masks_everything_but_the_sampled_tokens(tokenizer: Any) -> None:
    rows = _random_rows(tokenizer, episodes=6, seed=1)
    data = sft_dataset(rows)
    assert len(data) == 6
    for row, record in zip(rows, data):
        assert record["input_ids"] == row.prompt_ids + row.completion_ids
        assert record["completion_mask"] == [0] * len(row.prompt_ids) + row.completion_mask
    successful = sft_dataset(rows, only_successful=True)
    assert len(successful) == sum(row.success for row in rows) > 0


def test_failed_and_unsuccessful_episodes_are_left_out(tokenizer: Any) -> None:
    rows = _random_rows(tokenizer, episodes=4, seed=2)
    failed = [row.model_copy(update={"error": "boom", "success": True}) for row in rows]
    with pytest.raises(ConfigError, match="No successful episodes to fine-tune on among 4 rows"):
        sft_dataset([row.model_copy(update={"success": False}) for row in rows] + failed[:0],
                    only_successful=True)
    with pytest.raises(ConfigError, match="No rows with sampled tokens to fine-tune on among 4 rows"):
        sft_dataset(failed)


def test_sft_needs_a_rollout_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--trainer sft learns from a rollout file: pass --trajectories"):
        run_sft(TrainConfig(trainer="sft", backend="trl", env_id=BANDIT, out=str(tmp_path)))
    with pytest.raises(ConfigError, match="no such file"):
        run_sft(TrainConfig(trainer="sft", backend="trl", trajectories=str(tmp_path / "none.parquet"),
                            out=str(tmp_path)))


def test_sft_reads_several_rollout_files_a_repeated_one_counting_twice(tokenizer: Any, tiny_model: str,
                                                                        tmp_path: Path) -> None:
    """Demonstrations and DAgger rows train together: --trajectories a.parquet,b.parquet."""
    files = {"a": _random_rows(tokenizer, episodes=6, seed=1), "b": _random_rows(tokenizer, episodes=10, seed=2)}
    for name, rows in files.items():
        with RolloutWriter(tmp_path / f"{name}.parquet") as writer:
            writer.add(rows)
    wins = {name: sum(row.success for row in rows) for name, rows in files.items()}
    assert all(wins.values())
    spec = f"{tmp_path / 'a.parquet'}, {tmp_path / 'b.parquet'},{tmp_path / 'b.parquet'}"
    assert trajectory_files(spec) == [tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "b.parquet"]
    result = run_sft(TrainConfig(trainer="sft", backend="trl", trajectories=spec, out=str(tmp_path / "run"),
                                 steps=1, micro_batch_size=2, model=tiny_model))
    assert result.metrics[0]["train_rows"] == wins["a"] + 2 * wins["b"]

    with pytest.raises(ConfigError, match=r"no such file: .*x\.parquet, .*y\.parquet"):
        trajectory_files(f"{tmp_path / 'a.parquet'},{tmp_path / 'x.parquet'},{tmp_path / 'y.parquet'}")
    with pytest.raises(ConfigError, match="names no file"):
        trajectory_files(" , ")


def test_sft_out_of_max_seconds_stops_after_a_step_and_saves_the_model(tokenizer: Any, tiny_model: str,
                                                                        tmp_path: Path) -> None:
    with RolloutWriter(tmp_path / "rows.parquet") as writer:
        writer.add(_random_rows(tokenizer, episodes=16, seed=1))
    config = TrainConfig(trainer="sft", backend="trl", trajectories=str(tmp_path / "rows.parquet"),
                         out=str(tmp_path / "run"), steps=5, micro_batch_size=2, model=tiny_model, max_seconds=1e-6)
    result = run_sft(config)
    assert len(result.metrics) == 1 and (result.final_model / "model.safetensors").exists()
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == 1
    assert not (tmp_path / "run" / "sft").exists() or not list((tmp_path / "run" / "sft").glob("checkpoint-*"))


@pytest.mark.slow
def test_sft_on_successful_episodes_learns_the_best_arm(tokenizer: Any, tiny_model: str, tmp_path: Path) -> None:
    """Random play wins half the time; fine-tuned on its wins, the model picks the best arm."""
    rows = _random_rows(tokenizer, episodes=64, seed=3)
    with RolloutWriter(tmp_path / "rollouts.parquet") as writer:
        writer.add(rows)
    model, _ = load_model_and_tokenizer(tiny_model)
    before = _success_rate(model, tokenizer, range(5000, 5020))
    config = TrainConfig(trainer="sft", backend="trl", trajectories=str(tmp_path / "rollouts.parquet"),
                         out=str(tmp_path / "run"), steps=40, lr=3e-3, micro_batch_size=8)
    result = run_sft(config)

    losses = [m["loss"] for m in result.metrics]
    assert len(losses) == 40 and losses[-1] < losses[0] / 10
    assert [r["loss"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == pytest.approx(losses)
    tuned, _ = load_model_and_tokenizer(str(result.final_model))
    after = _success_rate(tuned.eval(), tokenizer, range(5000, 5020))
    assert before < 0.5 and after >= 0.9, (before, after)


def test_sft_reports_each_step_while_it_trains(tokenizer: Any, tiny_model: str, tmp_path: Path) -> None:
    model, _ = load_model_and_tokenizer(tiny_model)
    seen: list[tuple[int, float, float]] = []

    def on_step(step: int, log: dict[str, float]) -> None:  # the weights at that moment tell "live"
        seen.append((step, log["loss"], float(model.lm_head.weight.detach().sum())))

    logs = sft_train(model, tokenizer, sft_dataset(_random_rows(tokenizer, episodes=8, seed=1)),
                     out=tmp_path, steps=3, lr=1e-3, batch_size=4, on_step=on_step)
    assert [step for step, _, _ in seen] == [0, 1, 2]
    assert [loss for _, loss, _ in seen] == pytest.approx([log["loss"] for log in logs])
    assert len({weights for _, _, weights in seen}) == 3  # called between steps, not after training


@pytest.mark.parametrize(("name", "expected"), [("adamw", torch.optim.AdamW), ("sgd", torch.optim.SGD)])
def test_sft_steps_the_optimiser_it_is_given(tokenizer: Any, tiny_model: str, tmp_path: Path, name: str,
                                            expected: type) -> None:
    model, _ = load_model_and_tokenizer(tiny_model)
    used: list[Any] = []
    sft_train(model, tokenizer, sft_dataset(_random_rows(tokenizer, episodes=8, seed=1)), out=tmp_path, steps=1,
              lr=1e-3, batch_size=4, optimizer=name, momentum=0.5, optimizer_out=used)
    assert type(used[0]) is expected
    if name == "sgd":
        assert used[0].param_groups[0]["momentum"] == 0.5


def test_length_grouped_order_batches_similar_lengths_in_random_order() -> None:
    lengths = [(i * 37) % 200 + 1 for i in range(1000)]  # every length 1..200, five times, scrambled
    order = length_grouped_order(lengths, batch_size=8, samples=2000, seed=0, window=10)
    assert len(order) == 2000
    first_pass, second_pass = order[:1000], order[1000:]
    assert sorted(first_pass) == list(range(1000)) and sorted(second_pass) == list(range(1000))
    batches = [[lengths[i] for i in order[k:k + 8]] for k in range(0, 2000, 8)]
    spread = sum(max(b) - min(b) for b in batches) / len(batches)
    assert spread < 30  # random batches of 8 from 1..200 spread about 155
    tops = [max(b) for b in batches]
    assert sum(a < b for a, b in zip(tops, tops[1:])) > len(tops) / 3  # not run longest to shortest
    assert order == length_grouped_order(lengths, batch_size=8, samples=2000, seed=0, window=10)
    assert order != length_grouped_order(lengths, batch_size=8, samples=2000, seed=1, window=10)


def test_length_grouped_order_keeps_batches_full_when_rows_do_not_divide() -> None:
    order = length_grouped_order(list(range(1, 21)), batch_size=8, samples=48, seed=3, window=1)
    passes = [order[k:k + 16] for k in range(0, 48, 16)]  # 20 rows: two full batches a pass
    assert all(len(set(p)) == 16 for p in passes)
    assert len(set(order)) > 16  # a different four left out in some pass
    with pytest.raises(ConfigError, match="cannot fill a batch of 8"):
        length_grouped_order([5] * 7, batch_size=8, samples=8, seed=0)


def test_sft_group_by_length_feeds_the_planned_batches(tokenizer: Any, tiny_model: str, tmp_path: Path) -> None:
    """With group_by_length the model sees every row once, in batches that pad little."""
    from datasets import Dataset

    model, _ = load_model_and_tokenizer(tiny_model)
    lengths = [(i * 13) % 60 + 4 for i in range(64)]
    rows = [{"input_ids": [i + 10] + [42] * (n - 1), "completion_mask": [0] + [1] * (n - 1)}
            for i, n in enumerate(lengths)]
    seen: list[torch.Tensor] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["input_ids"].clone()), with_kwargs=True)
    sft_train(model, tokenizer, Dataset.from_list(rows), out=tmp_path, steps=8, lr=1e-3, batch_size=8,
              group_by_length=True)
    assert [batch.shape[0] for batch in seen] == [8] * 8
    assert sorted(int(row_id) - 10 for batch in seen for row_id in batch[:, 0]) == list(range(64))
    padded = sum(batch.numel() for batch in seen)
    assert padded < 1.25 * sum(lengths)  # drawn at random, batches of 8 pad to about 1.6x


def test_random_batch_order_reshuffles_each_pass_and_keeps_batches_full() -> None:
    order = random_batch_order(20, batch_size=8, samples=48, seed=3)
    passes = [order[k:k + 16] for k in range(0, 48, 16)]  # 20 rows: two full batches a pass
    assert all(len(set(p)) == 16 for p in passes)
    assert passes[0] != passes[1] and len(set(order)) > 16  # reshuffled, a different four left out
    assert order == random_batch_order(20, batch_size=8, samples=48, seed=3)
    assert order != random_batch_order(20, batch_size=8, samples=48, seed=4)
    with pytest.raises(ConfigError, match="7 rows cannot fill a batch of 8"):
        random_batch_order(7, batch_size=8, samples=8, seed=0)


def test_sorted_within_batches_keeps_each_batch_and_sorts_it() -> None:
    lengths = [5, 1, 4, 2, 9, 3, 8, 7]
    order = [0, 1, 2, 3, 4, 5, 6, 7]
    assert sorted_within_batches(order, lengths, batch_size=4) == [1, 3, 2, 0, 5, 7, 6, 4]


@pytest.mark.parametrize(("batch_size", "wanted", "expected"), [(16, 4, 4), (16, 3, 2), (6, 4, 3), (7, 4, 1),
                                                                 (2, 4, 2), (16, 1, 1)])
def test_sft_passes_is_the_largest_divisor_up_to_the_wish(batch_size: int, wanted: int, expected: int) -> None:
    assert sft_passes(batch_size, wanted) == expected


def _uneven_rows(lengths: list[int]) -> list[dict[str, list[int]]]:
    """Rows whose loss tokens vary with their length, so a per-pass mean would weigh them wrongly."""
    return [{"input_ids": [i + 10] + [(i * 7 + k) % 50 + 20 for k in range(n - 1)],
             "completion_mask": [0] * (n // 2) + [1] * (n - n // 2)} for i, n in enumerate(lengths)]


def test_sft_in_several_passes_takes_the_step_one_pass_takes(tokenizer: Any, tiny_model: str,
                                                            tmp_path: Path) -> None:
    """The same eight rows as one padded pass or four sorted ones: the same weights after the step,
    and the four passes pad far less."""
    from datasets import Dataset

    rows = Dataset.from_list(_uneven_rows([60, 5, 33, 8, 47, 12, 3, 21]))
    weights, padded = [], []
    for passes in (1, 4):
        model, _ = load_model_and_tokenizer(tiny_model)
        seen: list[torch.Tensor] = []
        model.register_forward_pre_hook(lambda _m, _a, kw, seen=seen: seen.append(kw["input_ids"].clone()),
                                        with_kwargs=True)
        sft_train(model, tokenizer, rows, out=tmp_path / str(passes), steps=1, lr=0.5, batch_size=8,
                  optimizer="sgd", passes=passes)
        assert [batch.shape[0] for batch in seen] == [8 // passes] * passes
        assert sorted(int(row_id) - 10 for batch in seen for row_id in batch[:, 0]) == list(range(8))
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        padded.append(sum(batch.numel() for batch in seen))
    start = torch.cat([p.detach().flatten() for p in load_model_and_tokenizer(tiny_model)[0].parameters()])
    moved = (weights[0] - start).norm()
    assert moved > 0.1
    assert (weights[1] - weights[0]).norm() < 1e-4 * moved
    assert padded[1] < 0.5 * padded[0]  # 8 x 60 = 480 padded, the sorted pairs 5+12+33+60 = 110 x 2


def test_freeze_parameters_matches_names_and_says_when_a_pattern_matches_none(tiny_model: str) -> None:
    model, _ = load_model_and_tokenizer(tiny_model)
    frozen = freeze_parameters(model, ["model.embed_tokens.*", "model.layers.0.*", "model.embed_tokens.weight"])
    assert frozen[0] == "model.embed_tokens.weight" and len(frozen) == len(set(frozen))
    assert all(name.startswith(("model.embed_tokens.", "model.layers.0.")) for name in frozen)
    assert {n for n, p in model.named_parameters() if not p.requires_grad} == set(frozen)
    with pytest.raises(ConfigError, match=r"'model\.layer\.0\.\*' names no parameter.*model\.embed_tokens\.weight"):
        freeze_parameters(model, ["model.layer.0.*"])

"""--trainer sft: fine-tuning on the successful episodes of rollout files, on either backend (TRL's
SFTTrainer used as a component, or the native engine), through the run skeleton."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console

import agentgym
from agentgym.errors import ConfigError
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.rows import TrajectoryRow
from agentgym.rollout.storage import RolloutWriter
from agentgym.trainers.engines.base import freeze_parameters, load_model_and_tokenizer
from agentgym.trainers.engines.batch import collate, to_sequences
from agentgym.trainers.engines.distributed import Dist
from trainer_helpers import learn, make_learner
from agentgym.trainers.learners.sft import SFTLearner, sft_update
from agentgym.trainers.loop.sources import SFTBatches, random_batch_order, trajectory_files
from agentgym.trainers.research.options import length_grouped_order
from agentgym.trainers.loop.metrics import read_jsonl
from agentgym.trainers.loop.run import train
from agentgym.trainers.settings import TrainConfig

BANDIT = "Bandit-LLM-v0"
BACKENDS = ["trl", "fsdp"]


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


def _write(path: Path, rows: list[TrajectoryRow]) -> Path:
    with RolloutWriter(path) as writer:
        writer.add(rows)
    return path


def _sft(tiny_model: str, backend: str, out: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {"trainer": "sft", "backend": backend, "model": tiny_model, "out": str(out),
                                 "trajectories": str(out.parent / "unused.parquet")}
    return TrainConfig.from_dict({**values, **changes})


def _learner(tiny_model: str, backend: str, tmp_path: Path, **changes: object) -> SFTLearner:
    learner = make_learner(SFTLearner, _sft(tiny_model, backend, tmp_path / "run", **changes), Dist())
    assert isinstance(learner, SFTLearner)
    return learner


@pytest.fixture(scope="module")
def tokenizer(tiny_model: str) -> Any:
    return load_model_and_tokenizer(tiny_model)[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_loss_is_on_the_sampled_tokens_only(tokenizer: Any, tiny_model: str, tmp_path: Path,
                                                backend: str) -> None:
    """The SFT loss is the token mean of the policy's own tokens' NLL: the prompt and the tokens that
    close a turn (mask 0) carry none; on trl it is TRL's own loss, on fsdp the native one."""
    rows = _random_rows(tokenizer, episodes=4, seed=1)
    assert all(0 in row.completion_mask for row in rows)
    learner = _learner(tiny_model, backend, tmp_path)
    sequences = to_sequences(rows, [1.0] * len(rows))
    tokens = sum(s.loss_tokens for s in sequences)
    loss = float(learner.engine.sft_loss(sequences, tokens).detach())
    batch = collate(sequences, pack=False, pad_id=learner.engine.pad_id)
    with torch.no_grad():
        logprobs = learner.engine.logprobs(batch)[0].detach().cpu()
    assert loss == pytest.approx(float(-(logprobs * batch.loss_mask).sum()) / tokens, rel=1e-4)


def test_failed_and_unsuccessful_episodes_are_left_out(tokenizer: Any, tiny_model: str, tmp_path: Path) -> None:
    rows = _random_rows(tokenizer, episodes=8, seed=2)
    failed = [row.model_copy(update={"error": "boom", "success": True}) for row in rows[:2]]
    unsampled = [row.model_copy(update={"success": True, "completion_mask": [0] * len(row.completion_mask)})
                 for row in rows[2:3]]
    path = _write(tmp_path / "rows.parquet", rows + failed + unsampled)
    batches = SFTBatches(_sft(tiny_model, "trl", tmp_path / "run", trajectories=str(path)))
    assert batches.total == 11 and len(batches.rows) == sum(row.success for row in rows) > 0
    assert all(row.success and row.error is None and any(row.completion_mask) for row in batches.rows)
    losers = _write(tmp_path / "losers.parquet", [row.model_copy(update={"success": False}) for row in rows[:4]])
    with pytest.raises(ConfigError, match="No successful episodes to fine-tune on among 4 rows"):
        SFTBatches(_sft(tiny_model, "trl", tmp_path / "run", trajectories=str(losers)))
    with pytest.raises(ConfigError, match="No successful episodes to fine-tune on among 3 rows"):
        SFTBatches(_sft(tiny_model, "trl", tmp_path / "run",
                        trajectories=str(_write(tmp_path / "bad.parquet", failed + unsampled))))


def test_sft_needs_a_rollout_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--trainer sft learns from a rollout file: pass --trajectories"):
        train(TrainConfig.from_dict({"trainer": "sft", "backend": "trl", "env_id": BANDIT, "out": str(tmp_path)}))
    with pytest.raises(ConfigError, match="no such file"):
        train(TrainConfig.from_dict({"trainer": "sft", "backend": "trl", "out": str(tmp_path),
                                     "trajectories": str(tmp_path / "none.parquet")}))
    assert not (tmp_path / "config.yaml").exists()  # refused before anything was written


def test_sft_reads_several_rollout_files_a_repeated_one_counting_twice(tokenizer: Any, tiny_model: str,
                                                                        tmp_path: Path) -> None:
    """Demonstrations and DAgger rows train together: --trajectories a.parquet,b.parquet."""
    files = {"a": _random_rows(tokenizer, episodes=6, seed=1), "b": _random_rows(tokenizer, episodes=10, seed=2)}
    for name, rows in files.items():
        _write(tmp_path / f"{name}.parquet", rows)
    wins = {name: sum(row.success for row in rows) for name, rows in files.items()}
    assert all(wins.values())
    spec = f"{tmp_path / 'a.parquet'}, {tmp_path / 'b.parquet'},{tmp_path / 'b.parquet'}"
    assert trajectory_files(spec) == [tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "b.parquet"]
    result = train(_sft(tiny_model, "trl", tmp_path / "run", trajectories=spec, steps=1, micro_batch_size=2),
                   device="cpu")
    assert result.metrics[0]["train_rows"] == wins["a"] + 2 * wins["b"]

    with pytest.raises(ConfigError, match=r"no such file: .*x\.parquet, .*y\.parquet"):
        trajectory_files(f"{tmp_path / 'a.parquet'},{tmp_path / 'x.parquet'},{tmp_path / 'y.parquet'}")
    with pytest.raises(ConfigError, match="names no file"):
        trajectory_files(" , ")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sft_out_of_max_seconds_stops_after_a_step_and_saves_the_model(tokenizer: Any, tiny_model: str,
                                                                        tmp_path: Path, backend: str) -> None:
    path = _write(tmp_path / "rows.parquet", _random_rows(tokenizer, episodes=16, seed=1))
    config = _sft(tiny_model, backend, tmp_path / "run", trajectories=str(path), steps=5, micro_batch_size=2,
                  max_seconds=1e-6)
    result = train(config, device="cpu")
    assert len(result.metrics) == 1 and (result.final_model / "model.safetensors").exists()
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == 1
    assert not list((tmp_path / "run").glob("trl/checkpoint-*"))  # TRL's own loop never ran


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_sft_on_successful_episodes_learns_the_best_arm(tokenizer: Any, tiny_model: str, tmp_path: Path,
                                                        backend: str) -> None:
    """Random play wins half the time; fine-tuned on its wins, the model picks the best arm."""
    path = _write(tmp_path / "rollouts.parquet", _random_rows(tokenizer, episodes=64, seed=3))
    model, _ = load_model_and_tokenizer(tiny_model)
    before = _success_rate(model, tokenizer, range(5000, 5020))
    config = _sft(tiny_model, backend, tmp_path / "run", trajectories=str(path), steps=40, lr=3e-3,
                  micro_batch_size=8)
    result = train(config, device="cpu")

    losses = [m["loss"] for m in result.metrics]
    assert len(losses) == 40 and losses[-1] < losses[0] / 10
    assert [r["loss"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == pytest.approx(losses)
    tuned, _ = load_model_and_tokenizer(str(result.final_model))
    after = _success_rate(tuned.eval(), tokenizer, range(5000, 5020))
    assert before < 0.5 and after >= 0.9, (before, after)


def test_sft_reports_each_step_while_it_trains(tokenizer: Any, tiny_model: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "rows.parquet", _random_rows(tokenizer, episodes=8, seed=1))
    screen = io.StringIO()
    result = train(_sft(tiny_model, "trl", tmp_path / "run", trajectories=str(path), steps=3, micro_batch_size=4),
                   console=Console(file=screen, width=200), device="cpu")
    shown = screen.getvalue()
    assert all(f"step {k}/3" in shown for k in (1, 2, 3))
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3]
    assert len({m["loss"] for m in result.metrics}) == 3  # a loss per step, each of the weights of its time


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "expected"), [("adamw", torch.optim.AdamW), ("sgd", torch.optim.SGD)])
def test_sft_steps_the_optimiser_it_is_given(tokenizer: Any, tiny_model: str, tmp_path: Path, name: str,
                                            expected: type, backend: str) -> None:
    learner = _learner(tiny_model, backend, tmp_path, optimizer=name, momentum=0.5 if name == "sgd" else 0.0)
    used: list[Any] = []
    learner.engine.optimizer.register_step_pre_hook(lambda optimizer, *_: used.append(optimizer))
    learn(learner, _random_rows(tokenizer, episodes=4, seed=1))
    assert len(used) == 1 and type(used[0]) is expected and used[0] is learner.engine.optimizer
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


def _rows_of_lengths(lengths: list[int], prompt: int = 1) -> list[TrajectoryRow]:
    """Successful rows of the given lengths, row i starting with token i + 10; the first ``prompt``
    tokens (or half the row, if ``prompt`` is None) are the prompt, the rest sampled."""
    rows = []
    for i, n in enumerate(lengths):
        ids = [i + 10] + [(i * 7 + k) % 50 + 20 for k in range(n - 1)]
        cut = prompt if prompt is not None else max(n // 2, 1)
        rows.append(TrajectoryRow(episode_id=f"e{i}", group_id=i, index_in_group=0, env_id=BANDIT, seed=i,
                                  prompt_ids=ids[:cut], completion_ids=ids[cut:], completion_mask=[1] * (n - cut),
                                  logprobs=[0.0] * (n - cut), reward=1.0, success=True, num_turns=1))
    return rows


def test_sft_group_by_length_feeds_the_planned_batches(tiny_model: str, tmp_path: Path) -> None:
    """With group_by_length the steps see every row once, in batches that pad little."""
    lengths = [(i * 13) % 60 + 4 for i in range(64)]
    path = _write(tmp_path / "rows.parquet", _rows_of_lengths(lengths))
    batches = SFTBatches(_sft(tiny_model, "trl", tmp_path / "run", trajectories=str(path), steps=8,
                              micro_batch_size=8, group_by_length=True))
    steps = [batches.rows_of_step(step) for step in range(8)]
    assert [len(rows) for rows in steps] == [8] * 8
    assert sorted(row.group_id for rows in steps for row in rows) == list(range(64))
    padded = sum(8 * max(len(r.prompt_ids) + len(r.completion_ids) for r in rows) for rows in steps)
    assert padded < 1.25 * sum(lengths)  # drawn at random, batches of 8 pad to about 1.6x


def test_a_batch_is_never_larger_than_the_rows(tiny_model: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "rows.parquet", _rows_of_lengths([5, 6, 7]))
    batches = SFTBatches(_sft(tiny_model, "trl", tmp_path / "run", trajectories=str(path), steps=4,
                              micro_batch_size=8))
    assert batches.batch_size == 3 and all(len(batches.rows_of_step(step)) == 3 for step in range(4))


def test_random_batch_order_reshuffles_each_pass_and_keeps_batches_full() -> None:
    order = random_batch_order(20, batch_size=8, samples=48, seed=3)
    passes = [order[k:k + 16] for k in range(0, 48, 16)]  # 20 rows: two full batches a pass
    assert all(len(set(p)) == 16 for p in passes)
    assert passes[0] != passes[1] and len(set(order)) > 16  # reshuffled, a different four left out
    assert order == random_batch_order(20, batch_size=8, samples=48, seed=3)
    assert order != random_batch_order(20, batch_size=8, samples=48, seed=4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sft_in_several_passes_takes_the_step_one_pass_takes(tiny_model: str, tmp_path: Path, backend: str) -> None:
    """The same eight rows (their loss tokens vary with their length, so a per-pass mean would weigh them
    wrongly) as one padded pass or four sorted ones: the same weights after the step, and the four
    passes pad far less."""
    rows = _rows_of_lengths([60, 5, 33, 8, 47, 12, 3, 21], prompt=None)
    weights, padded = [], []
    for passes in (1, 4):
        learner = _learner(tiny_model, backend, tmp_path / str(passes), optimizer="sgd", lr=0.5)
        seen: list[torch.Tensor] = []
        firsts: list[int] = []  # each row's first token (rows are padded on the left or the right)

        def record(_module, _args, kwargs, seen=seen, firsts=firsts) -> None:
            ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
            seen.append(ids.clone())
            firsts.extend(int(ids[r, int(mask[r].argmax())]) for r in range(ids.shape[0]))

        learner.engine.model.register_forward_pre_hook(record, with_kwargs=True)
        sft_update(learner.engine, rows, passes=passes)
        assert [batch.shape[0] for batch in seen] == [8 // passes] * passes
        assert sorted(first - 10 for first in firsts) == list(range(8))
        weights.append(torch.cat([p.detach().flatten() for p in learner.engine.model.parameters()]))
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

"""Both backends give the same GRPO update on the same rows, for every loss aggregation.

One step of SGD at lr 1 with no clipping makes the weight delta the gradient itself, so
comparing the deltas compares the gradients. The batch holds what made the backends
disagree before: a group filtered out for equal rewards, an episode split into two rows,
uneven lengths, and rows sampled by an older policy (importance-corrected).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agentgym.trainers.engines.distributed import Dist
from trainer_helpers import learn, make_learner
from agentgym.trainers.learners.grpo import GRPOLearner
from agentgym.trainers.settings import TrainConfig


def _rows(make_row: Any) -> list[Any]:
    rows = [
        # group 0: rewards differ, one long answer, sampled by an older policy (logprobs off the trainer's)
        make_row("<answer>Dragon</answer>", reward=1.0, group=0, index=0, logprob=-2.0),
        make_row("<answer>Phoenix and a much longer tail of tokens</answer>", reward=0.2, group=0, index=1,
                 logprob=-1.0),
        make_row("nope", reward=-0.1, group=0, index=2, logprob=-3.0),
        # group 1: every reward equal: filtered out, yet present in the batch
        make_row("<answer>Dragon</answer>", reward=0.5, group=1, index=0, seed=1),
        make_row("<answer>Dragon</answer>", reward=0.5, group=1, index=1, seed=1),
    ]
    # group 2: episode 0 is split into two rows (the server changed its prompt after turn 0)
    first = make_row("<answer>Griffin</answer>", reward=1.0, group=2, index=0, seed=2, logprob=-0.7)
    second = make_row("<answer>Dragon</answer>", reward=1.0, group=2, index=0, seed=2, logprob=-0.9, row_index=1,
                      prompt="Turn two.")
    two_turns = {"turn_rewards": [0.25, 0.75], "num_turns": 2}
    first = first.model_copy(update=two_turns)
    second = second.model_copy(update={**two_turns, "turns": [second.turns[0].model_copy(update={"turn": 1})]})
    other = make_row("<answer>Unicorn</answer>", reward=0.0, group=2, index=1, seed=2, logprob=-1.5)
    return [*rows, first, second, other]


def _one_step(backend: str, aggregation: str, rows: list[Any], tmp_path: Any, **settings: Any) -> dict[str, Any]:
    config = TrainConfig.from_dict({
        "trajectories": "unused.parquet", "backend": backend, "out": str(tmp_path / backend), "model": "tiny",
        "optimizer": "sgd", "lr": 1.0, "max_grad_norm": 0.0, "lr_schedule": "constant", "micro_batch_size": 2,
        "aggregation": aggregation, "constant_sum_tokens": 64, "episodes_per_step": 8, "group_size": 1,
        "clip_low": 10.0, "clip_high": 10.0, **settings})
    learner = make_learner(GRPOLearner, config, Dist())
    model = learner.engine.policy()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    metrics = learn(learner, rows)
    delta = torch.cat([(p.detach() - before[name]).flatten() for name, p in model.named_parameters()])
    return {"metrics": metrics, "delta": delta}


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "constant_sum"])
def test_fsdp_and_trl_take_the_same_step(make_row: Any, aggregation: str, tmp_path: Any) -> None:
    rows = _rows(make_row)
    native = _one_step("fsdp", aggregation, rows, tmp_path)
    trl = _one_step("trl", aggregation, rows, tmp_path)
    assert native["metrics"]["filtered_groups_rows"] == trl["metrics"]["filtered_groups_rows"] == 2
    assert native["metrics"]["loss"] == pytest.approx(trl["metrics"]["loss"], rel=1e-5, abs=1e-7)
    assert native["metrics"]["grad_norm"] == pytest.approx(trl["metrics"]["grad_norm"], rel=1e-5)
    assert native["metrics"]["grad_norm"] > 0
    cosine = torch.nn.functional.cosine_similarity(native["delta"], trl["delta"], dim=0).item()
    assert cosine > 1 - 1e-6
    assert torch.allclose(native["delta"], trl["delta"], rtol=1e-4, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("policy_loss", ["gspo", "cispo"])
def test_fsdp_and_trl_take_the_same_steps_with_each_policy_loss(make_row: Any, policy_loss: str, tmp_path: Any
                                                               ) -> None:
    """GSPO and CISPO over two epochs (the second against pi_old, so the ratios and the clip matter)."""
    rows = _rows(make_row)
    settings = {"policy_loss": policy_loss, "epochs": 2, "lr": 0.2, "clip_low": 0.002, "clip_high": 0.002}
    native = _one_step("fsdp", "token_mean", rows, tmp_path, **settings)
    trl = _one_step("trl", "token_mean", rows, tmp_path, **settings)
    for name in ("loss", "grad_norm", "ratio_mean", "clip_fraction"):
        assert native["metrics"][name] == pytest.approx(trl["metrics"][name], rel=1e-5, abs=1e-7), name
    # The second epoch moved the ratios past the narrow clip: the clip took part.
    assert native["metrics"]["clip_fraction"] > 0 and native["metrics"]["grad_norm"] > 0
    assert torch.allclose(native["delta"], trl["delta"], rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_fsdp_and_trl_take_the_same_sft_step(make_row: Any, tmp_path: Any) -> None:
    """The trl engine's SFT loss is TRL SFTTrainer's own compute_loss; the native one computes it itself."""
    from agentgym.trainers.registry import engine_class
    from agentgym.trainers.learners.sft import sft_update

    rows = [make_row("<answer>Dragon</answer>", index=i) for i in range(3)] + [make_row("<answer>Phoenix</answer>")]
    results = {}
    for backend in ("fsdp", "trl"):
        config = TrainConfig.from_dict({"trajectories": "unused.parquet", "trainer": "sft", "backend": backend,
                                        "out": str(tmp_path / backend), "optimizer": "sgd", "lr": 1.0,
                                        "max_grad_norm": 0.0, "lr_schedule": "constant"})
        engine = engine_class(backend)(config, Dist())
        before = {name: p.detach().clone() for name, p in engine.policy().named_parameters()}
        metrics = sft_update(engine, rows, passes=2)
        delta = torch.cat([(p.detach() - before[n]).flatten() for n, p in engine.policy().named_parameters()])
        results[backend] = (metrics, delta)
    (native, native_delta), (trl, trl_delta) = results["fsdp"], results["trl"]
    assert native["loss"] == pytest.approx(trl["loss"], rel=1e-5)
    assert native["grad_norm"] == pytest.approx(trl["grad_norm"], rel=1e-5)
    assert torch.allclose(native_delta, trl_delta, rtol=1e-4, atol=1e-7)


@pytest.fixture(scope="module")
def teacher_folder(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A slightly trained copy of the tiny model: a teacher both backends load."""
    from trainer_helpers import load_model, train_a_little
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("teacher")
    train_a_little(load_model(tiny_model), steps=3, lr=0.02).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["offline-full", "offline-top-k", "reverse_kl", "advantage"])
def test_fsdp_and_trl_take_the_same_distillation_step(make_row: Any, teacher_folder: str, mode: str,
                                                      tmp_path: Any) -> None:
    """Same rows, same teacher: the same KL, loss and update on both backends, offline and on-policy."""
    from agentgym.trainers.learners.distill import DistillLearner

    rows = _rows(make_row)
    source = ({"trajectories": "unused.parquet"} if mode.startswith("offline")
              else {"env_id": "Bandit-LLM-v0", "distill_loss": mode})
    extra = {"teacher_top_k": 4} if mode == "offline-top-k" else {}
    results = {}
    for backend in ("fsdp", "trl"):
        config = TrainConfig.from_dict({
            **source, **extra, "trainer": "distill", "backend": backend, "out": str(tmp_path / backend),
            "teacher": teacher_folder, "optimizer": "sgd", "lr": 1.0, "max_grad_norm": 0.0,
            "lr_schedule": "constant", "micro_batch_size": 3})
        learner = make_learner(DistillLearner, config, Dist())
        model = learner.engine.policy()
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        metrics = learn(learner, rows)
        delta = torch.cat([(p.detach() - before[name]).flatten() for name, p in model.named_parameters()])
        results[backend] = (metrics, delta)
    (native, native_delta), (trl, trl_delta) = results["fsdp"], results["trl"]
    kl = "forward_kl" if mode.startswith("offline") else "reverse_kl"
    assert native[kl] > 0
    for name in ("loss", kl, "teacher_logprob", "grad_norm"):
        assert native[name] == pytest.approx(trl[name], rel=1e-5, abs=1e-7), name
    assert native["grad_norm"] > 0
    assert torch.allclose(native_delta, trl_delta, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("value_model,gae_level", [("head", "token"), ("critic", "turn")])
def test_fsdp_and_trl_take_the_same_ppo_step(make_row: Any, tmp_path: Any, value_model: str, gae_level: str) -> None:
    """Same rows: the same values, GAE, policy and value losses, and the same update of the policy and of
    the value model (a head on the policy, or a separate critic) on both backends."""
    from agentgym.trainers.learners.ppo import PPOLearner

    rows = _rows(make_row)
    results = {}
    for backend in ("fsdp", "trl"):
        config = TrainConfig.from_dict({
            "trajectories": "unused.parquet", "trainer": "ppo", "backend": backend, "out": str(tmp_path / backend),
            "optimizer": "sgd", "lr": 1.0, "critic_lr": 1.0, "max_grad_norm": 0.0, "lr_schedule": "constant",
            "micro_batch_size": 3, "value_model": value_model, "gae_level": gae_level, "gae_lambda": 0.9,
            "gamma": 0.99, "clip_low": 10.0, "clip_high": 10.0})
        learner = make_learner(PPOLearner, config, Dist())
        modules = {"policy": learner.engine.policy(), "critic": learner.critic}
        before = {key: {n: p.detach().clone() for n, p in m.named_parameters()} for key, m in modules.items()}
        metrics = learn(learner, rows)
        deltas = {key: torch.cat([(p.detach() - before[key][n]).flatten() for n, p in m.named_parameters()])
                  for key, m in modules.items()}
        results[backend] = (metrics, deltas)
    (native, native_deltas), (trl, trl_deltas) = results["fsdp"], results["trl"]
    for name in ("policy_loss", "value_loss", "value_mean", "return_mean", "advantage_mean", "explained_variance",
                 "grad_norm", "critic_grad_norm"):
        assert native[name] == pytest.approx(trl[name], rel=1e-5, abs=1e-7), name
    assert native["value_loss"] > 0 and native["critic_grad_norm"] > 0
    for key in ("policy", "critic"):
        assert native_deltas[key].abs().max() > 0, key
        assert torch.allclose(native_deltas[key], trl_deltas[key], rtol=1e-4, atol=1e-7), key

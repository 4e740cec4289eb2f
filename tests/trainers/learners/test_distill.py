"""Distillation: the KLs on numbers worked by hand, the teacher's checks, and whole runs that learn.

The teacher is a copy of the tiny student trained a little here, so the student has something to
learn from it; runs assert
that the KL to the teacher falls at a real learning rate, with the teacher in this process and
behind the built-in server.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_helpers import API_KEY, load_model, train_a_little, learn

from agentgym.errors import ConfigError
from agentgym.trainers.loop.run import train
from agentgym.trainers.losses.distillation import (
    forward_kl_full,
    forward_kl_top_k,
    reverse_kl_sampled,
    teacher_top_k,
)
from agentgym.trainers.settings import TrainConfig

# -- the KLs, by hand --------------------------------------------------------------------------


def _log(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).log()


def test_forward_kl_full_of_two_fixed_distributions() -> None:
    # teacher p = [1/2, 1/2], student q = [1/4, 3/4]:
    # KL(p || q) = 1/2 ln(0.5/0.25) + 1/2 ln(0.5/0.75) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3) = 0.143841
    # and KL(p || p) = 0.
    student = torch.stack([_log([0.25, 0.75]), _log([0.5, 0.5])]).view(1, 2, 2).requires_grad_()
    teacher = torch.stack([_log([0.5, 0.5]), _log([0.5, 0.5])]).view(1, 2, 2)
    kl = forward_kl_full(student, teacher)
    assert kl[0].tolist() == pytest.approx([0.5 * math.log(4 / 3), 0.0], abs=1e-12)
    # d KL / d log q = -p: the gradient pulls every log q up by its teacher probability
    kl.sum().backward()
    assert student.grad is not None
    assert student.grad[0, 0].tolist() == pytest.approx([-0.5, -0.5])


def test_forward_kl_over_the_top_k_and_a_bucket_for_the_rest() -> None:
    # teacher p = [0.5, 0.3, 0.15, 0.05], student q uniform [0.25] * 4; the teacher's top 2 are tokens 0, 1.
    # Buckets {0}, {1}, {rest}: teacher [0.5, 0.3, 0.2], student [0.25, 0.25, 0.5]:
    # KL = 0.5 ln 2 + 0.3 ln 1.2 + 0.2 ln 0.4 = 0.346574 + 0.054696 - 0.183258 = 0.218012
    # The full KL = 0.5 ln 2 + 0.3 ln 1.2 + 0.15 ln 0.6 + 0.05 ln 0.2
    #             = 0.346574 + 0.054696 - 0.076624 - 0.080472 = 0.244174: the bucketed one is below it.
    teacher = _log([0.5, 0.3, 0.15, 0.05]).view(1, 1, 4)
    student = _log([0.25] * 4).view(1, 1, 4)
    ids, values = teacher_top_k(teacher, 2)
    assert ids.tolist() == [[[0, 1]]]
    bucketed = forward_kl_top_k(student, ids, values)
    assert bucketed.item() == pytest.approx(0.218012, abs=1e-6)
    assert forward_kl_full(student, teacher).item() == pytest.approx(0.244174, abs=1e-6)
    # All the teacher's mass in its top k: the bucketed KL is the full one.
    peaked = _log([0.6, 0.4, 1e-30, 1e-30]).view(1, 1, 4)
    ids, values = teacher_top_k(peaked, 2)
    assert forward_kl_top_k(student, ids, values).item() == pytest.approx(
        forward_kl_full(student, peaked).item(), abs=1e-5)


def test_reverse_kl_on_sampled_tokens_has_the_score_function_gradient() -> None:
    # Sequence 1: the student sampled two tokens with p_s = 1/2 and 1/4, the teacher gives them 1/4 and 1/4;
    # a third, padded token is masked out. Estimates ln(p_s / p_t): ln 2 = 0.693147 and 0.
    # Sequence 2: one token, p_s = p_t = 1/2: estimate 0.
    # Loss value: the mean over the 3 tokens, ln(2)/3 = 0.231049.
    # Gradient in log p_s: (estimate - its sequence's mean) / 3 tokens. Sequence 1's mean is ln(2)/2, so
    # [ln(2)/2, -ln(2)/2] / 3 = [ln(2)/6, -ln(2)/6]; sequence 2's token: (0 - 0) / 3 = 0. (The plain derivative
    # of the estimate would be 1/3 on each token, whose expectation under the student is 0.)
    student = torch.stack([_log([0.5, 0.25, 0.9]), _log([0.5, 0.9, 0.9])]).float().requires_grad_()
    teacher = torch.stack([_log([0.25, 0.25, 0.1]), _log([0.5, 0.1, 0.1])]).float()
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    loss, estimate = reverse_kl_sampled(student, teacher, mask)
    assert loss.item() == pytest.approx(math.log(2) / 3, abs=1e-6)
    assert estimate[0, :2].tolist() == pytest.approx([math.log(2), 0.0], abs=1e-6)
    loss.backward()
    assert student.grad is not None
    assert student.grad[0].tolist() == pytest.approx([math.log(2) / 6, -math.log(2) / 6, 0.0], abs=1e-6)
    assert student.grad[1].tolist() == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)


def test_micro_batching_changes_no_distillation_step(make_row: Any, tiny_model: str, tmp_path: Path) -> None:
    """The loss is normalised over the whole mini-batch and the baseline is per sequence: one pass or four,
    the same update."""
    from transformers import AutoTokenizer

    from agentgym.trainers.engines.distributed import Dist
    from trainer_helpers import make_learner
    from agentgym.trainers.learners.distill import DistillLearner

    teacher = tmp_path / "teacher"
    train_a_little(load_model(tiny_model), steps=3, lr=0.02).save_pretrained(teacher)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(teacher)
    rows = [make_row(answer, index=i, logprob=-1.0 - i / 10)
            for i, answer in enumerate(["<answer>Dragon</answer>", "no", "<answer>Phoenix</answer>", "x y z"])]
    deltas = []
    for size in (1, 4):
        config = _config(tmp_path / str(size), env_id="Bandit-LLM-v0", teacher=str(teacher), backend="fsdp",
                         optimizer="sgd", lr=1.0, max_grad_norm=0.0, micro_batch_size=size)
        learner = make_learner(DistillLearner, config, Dist())
        model = learner.engine.policy()
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        learn(learner, rows)
        deltas.append(torch.cat([(p.detach() - before[n]).flatten() for n, p in model.named_parameters()]))
    assert deltas[0].abs().max() > 0
    assert torch.allclose(deltas[0], deltas[1], rtol=1e-4, atol=1e-7)


# -- a teacher to learn from -------------------------------------------------------------------


@pytest.fixture(scope="module")
def teacher_model(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A slightly trained copy of the tiny student: a few AdamW steps of language modelling."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("teacher")
    train_a_little(load_model(tiny_model), steps=3, lr=0.02).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def teacher_server(teacher_model: str) -> Any:
    from agentgym.serve.launch import BuiltinServer

    with BuiltinServer(teacher_model, served_model_name="teacher", max_model_len=1024, api_key=API_KEY) as server:
        yield server


def _config(tmp_path: Path, **settings: Any) -> TrainConfig:
    base = {"trainer": "distill", "out": str(tmp_path / "run"), "model": "tiny", "lr": 3e-3,
            "lr_schedule": "constant", "checkpoint_every": 100, "micro_batch_size": 8}
    return TrainConfig.from_dict({**base, **settings})


def _falls(metrics: list[dict[str, float]], name: str) -> None:
    """The KL of the last two steps is well below the first two's (each step's is measured on its own rows)."""
    values = [m[name] for m in metrics]
    assert all(math.isfinite(v) for v in values)
    assert sum(values[-2:]) < 0.85 * sum(values[:2]), values


# -- the teacher's checks ----------------------------------------------------------------------


def test_a_teacher_of_another_tokenizer_is_refused_at_start(tmp_path: Path, bandit_rows: Path) -> None:
    from agentgym.models.tiny import TinySpec, build_tiny_model

    other = build_tiny_model(tmp_path / "other", TinySpec(vocab_size=600))
    config = _config(tmp_path, trajectories=str(bandit_rows), teacher=str(other))
    with pytest.raises(ConfigError, match="does not share the student's tokenizer") as caught:
        train(config)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_a_server_teacher_of_another_tokenizer_is_refused_at_start(tmp_path: Path, bandit_rows: Path) -> None:
    from agentgym.models.tiny import TinySpec, build_tiny_model
    from agentgym.serve.launch import BuiltinServer

    other = build_tiny_model(tmp_path / "other", TinySpec(vocab_size=600))
    with BuiltinServer(str(other), served_model_name="other", max_model_len=256, api_key=API_KEY) as server:
        config = _config(tmp_path, trajectories=str(bandit_rows), teacher_url=server.base_url,
                         teacher_api_key=API_KEY)
        with pytest.raises(ConfigError, match="does not share the student's tokenizer"):
            train(config)


def test_no_teacher_and_unread_settings_are_errors(tmp_path: Path, bandit_rows: Path) -> None:
    with pytest.raises(ConfigError, match="needs a teacher"):
        train(_config(tmp_path, trajectories=str(bandit_rows)))
    with pytest.raises(ConfigError, match="rollout.temperature is set, but an offline distillation"):
        train(_config(tmp_path, trajectories=str(bandit_rows), teacher="tiny", temperature=0.5))
    with pytest.raises(ConfigError, match="distill.teacher_top_k is set, but an on-policy"):
        train(_config(tmp_path, env_id="Bandit-LLM-v0", teacher="tiny", teacher_top_k=5))


def test_distillation_takes_grpos_checks_of_the_loss(tmp_path: Path) -> None:
    """distill_loss=advantage runs GRPO's importance-corrected loss: with top_p below 1 the server's
    logprobs are over the nucleus, so the correction is refused as it is for GRPO (it ran before);
    settings of the loss that a distillation does not read are named."""
    from agentgym.trainers.registry import check_settings

    with pytest.raises(ConfigError, match="rollout.top_p is 0.9: the server's logprobs are then renormalised"):
        check_settings(_config(tmp_path, env_id="Bandit-LLM-v0", teacher="tiny", distill_loss="advantage", top_p=0.9))
    check_settings(_config(tmp_path, env_id="Bandit-LLM-v0", teacher="tiny", distill_loss="advantage", top_p=0.9,
                           correction="none"))
    with pytest.raises(ConfigError, match="loss.clip_high is set, but trainer 'distill'"):
        check_settings(_config(tmp_path, env_id="Bandit-LLM-v0", teacher="tiny", clip_high=0.3))  # reverse_kl
    with pytest.raises(ConfigError, match="loss.kl_coef is set, but trainer 'distill'"):
        check_settings(_config(tmp_path, env_id="Bandit-LLM-v0", teacher="tiny", kl_coef=0.1))


def test_reverse_kl_weights_each_token_by_its_importance() -> None:
    """Tokens sampled by another distribution (an older policy, another temperature): estimate and
    gradient both times w = p_s / p_sampling. One sequence, estimates [ln 2, 0], weights [2, 0.5]:
    value (2 ln 2 + 0) / 2 = ln 2; gradient w x (estimate - mean) / 2 = [2 x ln2/2, 0.5 x -ln2/2] / 2."""
    student = _log([0.5, 0.25]).float().unsqueeze(0).requires_grad_()
    teacher = _log([0.25, 0.25]).float().unsqueeze(0)
    loss, _ = reverse_kl_sampled(student, teacher, torch.ones(1, 2), weights=torch.tensor([[2.0, 0.5]]))
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)
    loss.backward()
    assert student.grad[0].tolist() == pytest.approx([math.log(2) / 2, -math.log(2) / 8], abs=1e-6)


def test_the_reverse_kl_compares_the_two_models_own_distributions(make_row: Any, tiny_model: str,
                                                                  tmp_path: Path) -> None:
    """A student distilled from itself is at KL 0, whatever the rollout's temperature: both sides at
    temperature 1. Before, the student's logprobs were divided by the rollout's temperature (0.5) and
    the teacher's were not, so the same model was reported far from itself."""
    from trainer_helpers import learn, make_learner

    from agentgym.trainers.learners.distill import DistillLearner

    config = _config(tmp_path, env_id="Bandit-LLM-v0", model=tiny_model, teacher=tiny_model, temperature=0.5,
                     correction="none", lr=0.0)
    learner = make_learner(DistillLearner, config)
    rows = [make_row(answer, index=i, logprob=-1.0) for i, answer in
            enumerate(["<answer>Dragon</answer>", "<answer>Phoenix</answer>", "nope"])]
    metrics = learn(learner, rows)
    assert metrics["reverse_kl"] == pytest.approx(0.0, abs=1e-6)


# -- runs that learn ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("top_k", [None, 5])
def test_offline_distillation_brings_the_student_to_the_teacher(
        tmp_path: Path, bandit_rows: Path, teacher_model: str, top_k: int | None) -> None:
    settings: dict[str, Any] = {"teacher_top_k": top_k} if top_k else {}
    result = train(_config(tmp_path, trajectories=str(bandit_rows), teacher=teacher_model, steps=6,
                           episodes_per_step=8, **settings))
    _falls(result.metrics, "forward_kl")
    assert all(m["teacher_logprob"] < 0 for m in result.metrics)
    assert result.final_model is not None and (result.final_model / "config.json").exists()


@pytest.mark.slow
def test_offline_distillation_from_the_built_in_server(tmp_path: Path, bandit_rows: Path, teacher_server: Any,
                                                      teacher_model: str) -> None:
    """The server's top 5 and the in-process teacher's top 5 are the same numbers: the same first step."""
    common = {"trajectories": str(bandit_rows), "steps": 4, "episodes_per_step": 8, "teacher_top_k": 5}
    served = train(_config(tmp_path / "served", teacher_url=teacher_server.base_url, teacher_api_key=API_KEY,
                           **common))
    _falls(served.metrics, "forward_kl")
    local = train(_config(tmp_path / "local", teacher=teacher_model, **{**common, "steps": 1}))
    assert served.metrics[0]["forward_kl"] == pytest.approx(local.metrics[0]["forward_kl"], rel=1e-4)
    assert served.metrics[0]["teacher_logprob"] == pytest.approx(local.metrics[0]["teacher_logprob"], rel=1e-4)


@pytest.mark.slow
def test_a_stopped_distillation_resumes_with_its_teacher(tmp_path: Path, bandit_rows: Path,
                                                        teacher_model: str) -> None:
    """The checkpoint holds the student only; the teacher is loaded again from the settings."""
    config = _config(tmp_path, trajectories=str(bandit_rows), teacher=teacher_model, steps=3, episodes_per_step=8)
    whole = train(_config(tmp_path / "whole", trajectories=str(bandit_rows), teacher=teacher_model, steps=3,
                          episodes_per_step=8))
    stopped = train(config, stop_after=2)
    assert stopped.stopped_early and len(stopped.metrics) == 2
    resumed = train(config.updated({"resume": True}))
    assert len(resumed.metrics) == 1 and resumed.final_model is not None
    assert resumed.metrics[0]["forward_kl"] == pytest.approx(whole.metrics[2]["forward_kl"], rel=1e-4)


_ONLINE = {"env_id": "Bandit-LLM-v0", "steps": 8, "episodes_per_step": 8, "group_size": 4, "max_tokens": 12,
           "concurrency": 8}


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["reverse_kl", "advantage"])
def test_on_policy_distillation_brings_the_student_to_the_teacher(tmp_path: Path, teacher_model: str,
                                                                 loss: str) -> None:
    result = train(_config(tmp_path, teacher=teacher_model, distill_loss=loss, lr=2e-2, **_ONLINE))
    _falls(result.metrics, "reverse_kl")
    first, last = result.metrics[0], result.metrics[-1]
    # The student's own samples moved to the teacher's distribution (9.6 -> 3.2 nats here). Not the
    # teacher's logprob of them: against a random teacher the student first spreads its mass, which
    # cuts the reverse KL while E_student[log teacher] stays near -9.7 for these 8 steps.
    assert last["reverse_kl"] < first["reverse_kl"] / 2
    assert "reward" in last and "success" in last  # the episodes' stats, as GRPO logs them


@pytest.mark.slow
def test_on_policy_distillation_from_the_built_in_server(tmp_path: Path, teacher_server: Any) -> None:
    result = train(_config(tmp_path, teacher_url=teacher_server.base_url, teacher_api_key=API_KEY,
                           teacher_model="teacher", lr=2e-2, **_ONLINE))
    _falls(result.metrics, "reverse_kl")
    assert result.metrics[-1]["time/teacher"] > 0


@pytest.mark.vllm
@pytest.mark.slow
def test_offline_distillation_from_real_vllm(tmp_path: Path, bandit_rows: Path, teacher_model: str,
                                             real_vllm: Any, tiny_model: str) -> None:
    """vLLM's prompt_logprobs teach as the in-process teacher does: the same first step (CPU build of
    vLLM). The session's vLLM serves the tiny model, so here it is the teacher and the trained copy
    the student (the roles only need two different models with one tokenizer)."""
    common = {"trajectories": str(bandit_rows), "steps": 1, "episodes_per_step": 8, "teacher_top_k": 5,
              "model": teacher_model}
    served = train(_config(tmp_path / "served", teacher_url=real_vllm.base_url, **common))
    local = train(_config(tmp_path / "local", teacher=tiny_model, **common))
    assert served.metrics[0]["forward_kl"] > 0.01  # two different models: something to learn
    assert served.metrics[0]["forward_kl"] == pytest.approx(local.metrics[0]["forward_kl"], rel=1e-3)
    assert served.metrics[0]["teacher_logprob"] == pytest.approx(local.metrics[0]["teacher_logprob"], rel=1e-3)

"""GRPO's learner on the native engine in one process: a step learns, accumulation changes nothing,
checkpoints resume."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from trainer_helpers import with_turn_rewards, learn

from agentgym.trainers.engines.base import lr_factor
from agentgym.trainers.engines.batch import collate, to_sequences
from agentgym.trainers.engines.distributed import Dist
from trainer_helpers import make_learner
from agentgym.trainers.learners.grpo import GRPOLearner
from agentgym.trainers.learners.sft import sft_update
from agentgym.trainers.loop.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from agentgym.trainers.losses.advantages import (
    playing_turn_advantages,
    row_advantages,
    token_advantages,
)
from agentgym.trainers.settings import TrainConfig

BASE = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "backend": "fsdp", "group_size": 4, "episodes_per_step": 8,
                              "lr": 1e-3, "seed": 0, "lr_schedule": "constant", "pack_sequences": False,
                              "micro_batch_size": 8})


def _trainer(**changes: object) -> GRPOLearner:
    learner = make_learner(GRPOLearner, BASE.updated(changes), Dist())
    assert isinstance(learner, GRPOLearner)
    return learner


def _rows(make_row) -> list:
    """Two groups of four: Dragon pays, Phoenix does not, one unreadable answer."""
    answers = ["<answer>Dragon</answer>", "<answer>Phoenix</answer>", "<answer>Dragon</answer>", "nonsense"]
    rewards = [1.0, 0.3, 1.0, -0.1]
    return [make_row(answer, reward=reward, group=group, index=i, seed=group, prompt=f"Task {group}.")
            for group in range(2) for i, (answer, reward) in enumerate(zip(answers, rewards))]


def _params(trainer: GRPOLearner) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.engine.model.named_parameters()}


def _stepped_gradients(trainer: GRPOLearner) -> list[dict[str, torch.Tensor]]:
    """Filled, at each optimiser step, with the gradients the optimiser stepped along (clipped: the
    engine clears them after the step)."""
    seen: list[dict[str, torch.Tensor]] = []

    def record(*_: object) -> None:
        seen.append({name: p.grad.detach().clone() for name, p in trainer.engine.model.named_parameters()
                     if p.grad is not None})

    trainer.engine.optimizer.register_step_pre_hook(record)
    return seen


def _logprob_of(trainer: GRPOLearner, make_row, answer: str) -> float:
    batch = collate(to_sequences([make_row(answer, prompt="Task 0.")], [1.0]), pack=False)
    with torch.no_grad():
        logprobs = trainer.engine.logprobs(batch)[0].detach()  # the engine enables grad itself
    return float((logprobs * batch.loss_mask).sum())


def test_a_step_makes_the_better_answer_likelier(make_row) -> None:
    trainer = _trainer()
    before = _logprob_of(trainer, make_row, "<answer>Dragon</answer>") - _logprob_of(trainer, make_row, "nonsense")
    for _ in range(3):
        metrics = learn(trainer, _rows(make_row))
    after = _logprob_of(trainer, make_row, "<answer>Dragon</answer>") - _logprob_of(trainer, make_row, "nonsense")
    assert after > before + 1.0
    assert trainer.version == 3 and trainer.engine.optimizer_steps == 3
    assert metrics["train_sequences"] == 8 and metrics["grad_norm"] > 0
    assert metrics["loss_tokens"] == sum(sum(r.completion_mask) for r in _rows(make_row))
    assert metrics["entropy"] > 0
    assert "clip_fraction" not in metrics  # one update a step: the ratio to pi_old is 1, nothing is clipped


def _turn_logprobs(trainer: GRPOLearner, row) -> list[float]:
    """The summed logprob of each turn's sampled tokens."""
    batch = collate(to_sequences([row], [1.0]), pack=False)
    with torch.no_grad():
        logprobs = trainer.engine.logprobs(batch)[0].detach()  # the engine enables grad itself
    return [float(logprobs[0, turn.start:turn.end].sum()) for turn in row.turns]


def test_the_turn_level_teaches_where_the_episode_level_has_nothing(stall_rows) -> None:
    """Equal episode rewards, but the solver's episode was paid a turn sooner than the one that
    stalled: GRPO skips the group; GiGPO makes the solver's first move likelier than the stall,
    at the level both read first."""
    rows = [with_turn_rewards(stall_rows[0], [1.0, 0.0]), with_turn_rewards(stall_rows[1], [0.0, 1.0])]

    def preference(trainer: GRPOLearner) -> float:
        return _turn_logprobs(trainer, rows[0])[0] - _turn_logprobs(trainer, rows[1])[0]

    flat = _trainer(advantage="dr_grpo")
    before = _params(flat)
    assert learn(flat, rows)["train_sequences"] == 0
    assert all(torch.equal(before[name], value) for name, value in _params(flat).items())

    gigpo = _trainer(advantage="dr_grpo", turn_advantage_weight=1.0, turn_discount=0.5)
    start = preference(gigpo)
    for _ in range(3):
        metrics = learn(gigpo, rows)
    assert metrics["train_sequences"] == 2 and metrics["turn_credit_share"] > 0
    assert preference(gigpo) > start + 1.0


def test_the_trainer_takes_its_baseline_from_the_config(stall_rows) -> None:
    """The solver's and a late winner's episodes against one that stalled to the turn limit: its
    last turn, which no winner reached, carries the failed episode's advantage with
    ``baseline=episode``, and with ``baseline=turn`` its return against the last winner's."""
    episode, _ = _trainer(advantage="dr_grpo").compute_advantages(stall_rows)
    turn, _ = _trainer(advantage="dr_grpo", baseline="turn").compute_advantages(stall_rows)
    assert turn == token_advantages(stall_rows, "dr_grpo", baseline="turn") and turn != episode
    stuck = stall_rows[2]
    late_turn = stuck.turns[-1].start
    assert episode[2][late_turn] == row_advantages(stall_rows, "dr_grpo")[2] < 0
    assert turn[2][late_turn] == pytest.approx(playing_turn_advantages(stall_rows, "dr_grpo")[stuck.episode_id][-1])


def test_top_entropy_quantile_trains_on_the_uncertain_tokens_only(make_row) -> None:
    """At 0.2 about a fifth of the sampled tokens carry the policy loss, and the steps still make
    the better answer likelier; by default every token does."""
    trainer = _trainer(top_entropy_quantile=0.2)
    before = _logprob_of(trainer, make_row, "<answer>Dragon</answer>") - _logprob_of(trainer, make_row, "nonsense")
    for _ in range(3):
        metrics = learn(trainer, _rows(make_row))
    after = _logprob_of(trainer, make_row, "<answer>Dragon</answer>") - _logprob_of(trainer, make_row, "nonsense")
    assert 0.15 <= metrics["policy_token_share"] <= 0.35
    assert after > before
    assert "policy_token_share" not in learn(_trainer(), _rows(make_row))  # every token: a constant, not logged


def test_frozen_parameters_stay_as_they_were(make_row) -> None:
    trainer = _trainer(frozen_parameters=["model.embed_tokens.*", "model.layers.0.*"])
    before = _params(trainer)
    learn(trainer, _rows(make_row))
    after = _params(trainer)
    frozen = [n for n in before if n.startswith(("model.embed_tokens.", "model.layers.0."))]
    assert frozen and all(torch.equal(before[n], after[n]) for n in frozen)
    assert not any(p.requires_grad for n, p in trainer.engine.model.named_parameters() if n in frozen)
    assert not torch.equal(before["model.layers.1.self_attn.v_proj.weight"],
                           after["model.layers.1.self_attn.v_proj.weight"])


def test_sgd_steps_along_the_clipped_gradient_and_learns(make_row) -> None:
    trainer = _trainer(optimizer="sgd", lr=0.5, max_grad_norm=1.0)
    assert isinstance(trainer.engine.optimizer, torch.optim.SGD)
    before = _params(trainer)
    stepped = _stepped_gradients(trainer)
    learn(trainer, _rows(make_row))
    after = _params(trainer)
    (grads,) = stepped  # as clipped and stepped
    assert grads.keys() == after.keys()
    assert float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()]))) <= 1.001
    for name, value in after.items():  # plain SGD: the step is -lr times the gradient, weight by weight
        torch.testing.assert_close(value - before[name], -0.5 * grads[name], atol=1e-6, rtol=1e-4, msg=name)

    gap = _logprob_of(trainer, make_row, "<answer>Dragon</answer>") - _logprob_of(trainer, make_row, "nonsense")
    for _ in range(3):
        learn(trainer, _rows(make_row))
    assert _logprob_of(trainer, make_row, "<answer>Dragon</answer>") - _logprob_of(trainer, make_row, "nonsense") > gap


def test_sgd_momentum_carries_the_last_step(make_row) -> None:
    plain, heavy = _trainer(optimizer="sgd", lr=0.1), _trainer(optimizer="sgd", lr=0.1, momentum=0.9)
    assert heavy.engine.optimizer.param_groups[0]["momentum"] == 0.9
    moves = []
    for trainer in (plain, heavy):
        learn(trainer, _rows(make_row))
        middle = _params(trainer)
        learn(trainer, _rows(make_row))
        moves.append(sum(float((p - middle[n]).norm()) for n, p in _params(trainer).items()))
    assert moves[1] > moves[0] * 1.5  # the second step adds 0.9 of the first


def test_zero_variance_groups_teach_nothing(make_row) -> None:
    trainer = _trainer()
    before = _params(trainer)
    same = [make_row(reward=0.3, index=i) for i in range(4)]
    metrics = learn(trainer, same)
    assert metrics["train_sequences"] == 0 and metrics["filtered_groups_rows"] == 4
    assert all(torch.equal(before[n], p) for n, p in _params(trainer).items())


@pytest.mark.parametrize("changes", [
    {"micro_batch_size": 1},  # eight micro-batches accumulated
    {"micro_batch_size": 3},
    {"pack_sequences": True, "micro_batch_tokens": 200},  # packed, several bins
    {"aggregation": "sequence_mean", "micro_batch_size": 2},
])
def test_gradient_accumulation_and_packing_give_the_same_update(make_row, changes: dict) -> None:
    reference = _trainer(**({"aggregation": changes["aggregation"]} if "aggregation" in changes else {}))
    learn(reference, _rows(make_row))
    other = _trainer(**changes)
    learn(other, _rows(make_row))
    expected = _params(reference)
    for name, value in _params(other).items():
        torch.testing.assert_close(value, expected[name], atol=2e-6, rtol=1e-4, msg=name)


def test_clipping_and_mini_batches(make_row) -> None:
    trainer = _trainer(mini_batches=2, epochs=2, max_grad_norm=1e-4)
    stepped = _stepped_gradients(trainer)
    metrics = learn(trainer, _rows(make_row))
    assert trainer.engine.optimizer_steps == 4 and len(stepped) == 4  # 2 mini-batches x 2 epochs
    assert metrics["grad_norm"] > 1e-4  # measured before clipping
    for grads in stepped:
        assert float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()]))) <= 1e-4 * 1.001
    assert all(p.grad is None for p in trainer.engine.model.parameters())  # cleared after each step
    # Later updates compare against the policy of the step's start: the ratio moves off 1.
    assert metrics["ratio_mean"] != pytest.approx(1.0, abs=1e-7)


def test_kl_to_the_reference_is_logged(make_row) -> None:
    trainer = _trainer(kl_coef=0.1, epochs=2)
    with pytest.raises(RuntimeError, match="no reference model was kept"):  # the run loop keeps it
        learn(trainer, _rows(make_row))
    trainer.engine.keep_reference(trainer.engine.model_path)
    metrics = learn(trainer, _rows(make_row))
    assert trainer.engine.reference is not None and metrics["kl"] > 0
    assert "kl" not in learn(_trainer(), _rows(make_row))  # no KL term, no constant metric


def test_sft_step_lowers_the_loss(make_row) -> None:
    trainer = _trainer()
    rows = [make_row("<answer>Dragon</answer>", index=i) for i in range(4)]
    first = sft_update(trainer.engine, rows, lr=3e-3)
    assert first["lr"] == 3e-3
    for _ in range(5):
        last = sft_update(trainer.engine, rows, lr=3e-3)["loss"]
    assert last < first["loss"] * 0.7
    assert trainer.engine.schedule_step == 0  # the warm-up leaves the RL schedule alone
    assert trainer.engine.optimizer.param_groups[0]["lr"] == BASE.optim.lr
    assert trainer.version == 0  # nor the policy version


def test_lr_schedule_warms_up_then_decays() -> None:
    config = BASE.updated({"lr_schedule": "cosine", "warmup_steps": 2, "steps": 10, "min_lr_ratio": 0.1})
    factors = [lr_factor(config, step) for step in range(12)]
    assert factors[:2] == [0.5, 1.0]
    assert factors[2] == pytest.approx(1.0) and factors[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(factors[1:]))


def test_checkpoint_resumes_exactly(make_row, tmp_path: Path) -> None:
    rows = _rows(make_row)
    straight = _trainer()
    for _ in range(3):
        learn(straight, rows)

    first = _trainer()
    learn(first, rows)
    save_checkpoint(first, tmp_path, step=1, loop_state={"data_position": 7})
    torch.manual_seed(12345)  # the checkpoint must restore the RNG, whatever happened since
    second = _trainer()
    state = load_checkpoint(second, latest_checkpoint(tmp_path))
    assert state == {"step": 1, "data_position": 7}
    assert second.version == 1
    for _ in range(2):
        learn(second, rows)
    expected = _params(straight)
    for name, value in _params(second).items():
        torch.testing.assert_close(value, expected[name], atol=0, rtol=0, msg=name)


def test_old_checkpoints_are_pruned(make_row, tmp_path: Path) -> None:
    trainer = _trainer()
    for step in range(1, 5):
        save_checkpoint(trainer, tmp_path, step=step, loop_state={}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000003", "step-000004"]


def test_lora_trains_adapters_and_exports_merged_weights(make_row, tmp_path: Path, tiny_model: str) -> None:
    pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    trainer = _trainer(lora=True, lora_rank=4, lora_alpha=8, lr=1e-2)
    trainable = [n for n, p in trainer.engine.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    for _ in range(2):
        learn(trainer, _rows(make_row))
    weights = trainer.weights()
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert set(weights) == set(base.state_dict())  # plain transformers names, LoRA merged in
    reference = trainer.engine.model.merge_and_unload().state_dict()
    changed = [n for n in weights if not torch.equal(weights[n], base.state_dict()[n])]
    assert changed
    for name in changed:
        torch.testing.assert_close(weights[name], reference[name], atol=1e-6, rtol=1e-5)


def test_save_pretrained_writes_a_loadable_model(make_row, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    trainer = _trainer()
    learn(trainer, _rows(make_row))
    folder = trainer.export(tmp_path / "final")
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, trainer.engine.model.state_dict()[name], atol=0, rtol=0, msg=name)
    assert (folder / "tokenizer_config.json").exists()


def test_overlong_shaping_takes_reward_off_before_the_advantages(make_row) -> None:
    """DAPO's soft overlong punishment on the episodes' sampled tokens (L_max the shortest answer's length
    plus 2, L_cache 2, penalty 0.5): the shortest lose nothing, one token more 0.25, two or more 0.5."""
    from agentgym.trainers.losses.shaping import episode_sampled_tokens, overlong_penalty

    rows = _rows(make_row)
    lengths = episode_sampled_tokens(rows)
    shortest = min(lengths.values())
    trainer = _trainer(overlong_max_tokens=shortest + 2, overlong_cache_tokens=2, overlong_penalty=0.5)
    shaped, metrics = trainer.shaped_rewards(rows)
    penalties = [overlong_penalty(lengths[r.episode_id], shortest + 2, 2, 0.5) for r in rows]
    assert [r.reward for r in shaped] == pytest.approx([r.reward + p for r, p in zip(rows, penalties)])
    assert [overlong_penalty(shortest + n, shortest + 2, 2, 0.5) for n in range(4)] == [0.0, -0.25, -0.5, -0.5]
    assert 0.0 in penalties and len(set(penalties)) > 1  # some answers are longer than others
    assert metrics["overlong_penalty"] == pytest.approx(-sum(penalties) / len(penalties))
    assert metrics["overlong_episodes"] == pytest.approx(sum(p < 0 for p in penalties) / len(penalties))
    advantages, step_metrics = trainer.compute_advantages(rows)
    assert advantages == token_advantages(shaped, "grpo", filter_zero_variance=True)
    assert step_metrics["overlong_penalty"] == metrics["overlong_penalty"]
    assert trainer.shaped_rewards(rows)[1] != {} and _trainer().shaped_rewards(rows) == (rows, {})


def test_reinforce_pp_takes_each_tokens_kl_into_its_return(make_row, tmp_path: Path) -> None:
    """grpo.advantage=reinforce_pp with kl_penalty=k1_reward: the learner's advantages are the pure function's
    on the tokens' k1 to the reference (the start model), and the KL term leaves the loss."""
    from trainer_helpers import keep_current_as_reference

    from agentgym.trainers.losses.advantages import reinforce_pp_advantages

    trainer = _trainer(advantage="reinforce_pp", kl_coef=0.5, kl_penalty="k1_reward", lr=0.05)
    keep_current_as_reference(trainer.engine, tmp_path / "reference")
    rows = _rows(make_row)
    assert "kl" not in learn(trainer, rows)  # the KL is in the reward, not in the loss
    kl = trainer.token_kl(rows)
    assert any(abs(value) > 1e-4 for values in kl for value in values)
    advantages, metrics = trainer.compute_advantages(rows)
    expected = reinforce_pp_advantages(rows, kl, 0.5, filter_zero_variance=True)
    for got, want in zip(advantages, expected):
        assert got == pytest.approx(want, abs=1e-5)
    assert metrics["kl_penalty"] == pytest.approx(sum(map(sum, kl)) / len(rows), abs=1e-6)  # one row an episode


def test_reinforce_pp_and_dynamic_sampling_settings_say_what_they_need() -> None:
    from agentgym.errors import ConfigError
    from agentgym.trainers.registry import check_settings

    with pytest.raises(ConfigError, match="set -s kl_penalty=k1_reward"):
        check_settings(BASE.updated({"advantage": "reinforce_pp", "kl_coef": 0.1}))
    with pytest.raises(ConfigError, match="reinforce_pp has no group baseline"):
        check_settings(BASE.updated({"advantage": "reinforce_pp", "baseline": "turn"}))
    with pytest.raises(ConfigError, match="set filter_zero_variance=true with it"):
        BASE.updated({"dynamic_sampling_rounds": 2, "filter_zero_variance": False})
    offline = BASE.updated({"env_id": None, "trajectories": "rows.parquet", "dynamic_sampling_rounds": 2})
    with pytest.raises(ConfigError, match="grpo.dynamic_sampling_rounds is set"):
        check_settings(offline)
    with pytest.raises(ConfigError, match=r"overlong_cache_tokens \(8\) must not exceed overlong_max_tokens \(4\)"):
        check_settings(BASE.updated({"overlong_max_tokens": 4, "overlong_cache_tokens": 8}))
    check_settings(BASE.updated({"advantage": "reinforce_pp", "kl_coef": 0.1, "kl_penalty": "k1_reward"}))


def test_the_learner_tells_the_loop_which_groups_have_signal(make_row) -> None:
    trainer = _trainer(dynamic_sampling_rounds=3)
    assert trainer.refill_rounds == 3 and _trainer().refill_rounds == 0
    assert trainer.has_signal([make_row(reward=1.0, index=0), make_row(reward=0.0, index=1)])
    assert not trainer.has_signal([make_row(reward=0.3, index=0), make_row(reward=0.3, index=1)])
    assert not trainer.has_signal([make_row(reward=1.0, index=0)])  # a lone episode: no group to compare
    assert _trainer(advantage="reinforce_pp").has_signal([make_row(reward=1.0, index=0)])  # no group needed

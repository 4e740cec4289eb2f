"""The shared RL arithmetic, against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.losses.advantages import (
    discounted_returns,
    group_advantages,
    playing_baseline_advantages,
    zero_variance_groups,
)
from agentgym.trainers.losses.kl import kl_k3
from agentgym.trainers.losses.masked import masked_mean
from agentgym.trainers.losses.policy import high_entropy_mask, importance_weights, policy_loss
from agentgym.trainers.losses.settings import LossSettings as LossConfig
from agentgym.trainers.research.options import anchor_advantages
from agentgym.trainers.settings import TrainConfig

# Two groups of 4: rewards [1, 0, 0, 1] (mean 0.5, sample std sqrt(1/3)) and [2, 2, 2, 2].
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
STD = math.sqrt(1 / 3)


def test_grpo_scales_by_the_groups_sample_std() -> None:
    advantages = group_advantages(REWARDS, 4, "grpo", eps=0.0)
    expected = [0.5 / STD, -0.5 / STD, -0.5 / STD, 0.5 / STD]
    assert advantages[:4].tolist() == pytest.approx(expected)
    # A group where all did the same: zero advantage, not a division by zero.
    assert group_advantages(REWARDS, 4, "grpo")[4:].tolist() == [0.0] * 4


def test_dr_grpo_and_no_std_only_center() -> None:
    for method in ("dr_grpo", "grpo_no_std"):
        assert group_advantages(REWARDS, 4, method).tolist() == [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]


def test_rloo_subtracts_the_mean_of_the_others() -> None:
    # First sample: 1 - mean(0, 0, 1) = 2/3; second: 0 - mean(1, 0, 1) = -2/3.
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 4, "rloo")
    assert advantages.tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])


def test_rewards_must_come_in_whole_groups() -> None:
    with pytest.raises(ConfigError, match="5 rewards do not split into groups of 4"):
        group_advantages(torch.ones(5), 4)
    with pytest.raises(ConfigError, match="Unknown advantage method 'ppo'"):
        group_advantages(torch.ones(4), 4, "ppo")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rloo needs group_size >= 2"):
        group_advantages(torch.ones(4), 1, "rloo")


def test_zero_variance_groups_are_flagged_per_sequence() -> None:
    assert zero_variance_groups(REWARDS, 4).tolist() == [False] * 4 + [True] * 4


def test_discounted_returns_run_back_from_the_last_turn() -> None:
    assert discounted_returns([-0.1, -0.1, 10.0], 0.5) == pytest.approx([-0.1 - 0.05 + 2.5, -0.1 + 5.0, 10.0])
    assert discounted_returns([1.0, 2.0], 1.0) == pytest.approx([3.0, 2.0])
    assert discounted_returns([], 0.95) == []


def test_anchor_advantages_compare_only_turns_from_the_same_state() -> None:
    # Turns 0, 1 and 3 acted in state "a"; turn 2 alone in "b"; turns 4 and 5 in "c" with equal returns.
    returns = [3.0, 1.0, 7.0, 2.0, 5.0, 5.0]
    anchors = ["a", "a", "b", "a", "c", "c"]
    assert anchor_advantages(returns, anchors, "dr_grpo") == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0, 0.0])
    scaled = anchor_advantages(returns, anchors, "grpo")  # the state's sample std is 1
    assert scaled == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0, 0.0], rel=1e-3)
    with pytest.raises(ConfigError, match="one anchor per turn"):
        anchor_advantages([1.0], ["a", "b"])


def test_each_turn_is_compared_with_the_other_episodes_still_playing() -> None:
    # Returns-to-go of a won 2-turn episode and two failed 4-turn ones.
    won, lost_a, lost_b = [9.9, 10.0], [-0.4, -0.3, -0.2, -0.1], [-0.4, -0.3, -0.2, -0.1]
    values = playing_baseline_advantages([won, lost_a, lost_b])
    assert values[0] == pytest.approx([9.9 - (-0.4), 10.0 - (-0.3)])  # the others' mean, itself left out
    assert values[1][:2] == pytest.approx([-0.4 - (9.9 - 0.4) / 2, -0.3 - (10.0 - 0.3) / 2])
    # From turn 2 only the failures play, and alike: nothing left to tell apart.
    assert values[1][2:] == values[2][2:] == pytest.approx([0.0, 0.0])
    # Each turn's advantages over the episodes playing it sum to zero: nothing pushes every turn one way.
    for turn in range(4):
        assert sum(v[turn] for v in values if len(v) > turn) == pytest.approx(0.0, abs=1e-9)


def test_a_turn_no_other_episode_reached_keeps_the_last_baseline() -> None:
    values = playing_baseline_advantages([[1.0, 2.0, 3.0], [5.0]])
    assert values[0] == pytest.approx([1.0 - 5.0, 2.0 - 5.0, 3.0 - 5.0])
    assert playing_baseline_advantages([[1.0, 2.0]]) == [[0.0, 0.0]]  # alone: no baseline to take
    assert playing_baseline_advantages([[], [1.0]]) == [[], [0.0]]


def test_with_one_turn_each_the_playing_baseline_is_rloo() -> None:
    rewards = [1.0, 0.0, 0.5, 0.25]
    values = playing_baseline_advantages([[r] for r in rewards])
    expected = group_advantages(torch.tensor(rewards), 4, "rloo").tolist()
    assert [v[0] for v in values] == pytest.approx(expected)


def test_per_token_advantages_weight_each_token_alone() -> None:
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mask = torch.ones(1, 3)
    per_token = torch.tensor([[2.0, 0.0, -1.0]])
    loss = policy_loss(logprobs, logprobs.detach(), per_token, mask).loss
    loss.backward()
    # On policy the ratio is 1: d(loss)/d(logprob) = -advantage / tokens, token by token.
    assert logprobs.grad[0].tolist() == pytest.approx([-2.0 / 3, 0.0, 1.0 / 3])
    # A sequence's advantage given per sequence or repeated per token is the same loss.
    same = policy_loss(logprobs, logprobs.detach(), torch.tensor([1.5]), mask).loss
    repeated = policy_loss(logprobs, logprobs.detach(), torch.full((1, 3), 1.5), mask).loss
    assert float(same.detach()) == pytest.approx(float(repeated.detach()))


def test_masked_mean_ignores_masked_tokens_and_never_divides_by_zero() -> None:
    values = torch.tensor([[1.0, 100.0], [3.0, 5.0]])
    assert masked_mean(values, torch.tensor([[1, 0], [1, 1]])).item() == pytest.approx(3.0)
    assert masked_mean(values, torch.zeros(2, 2)).item() == 0.0
    assert masked_mean(values, torch.tensor([[1, 0], [1, 1]]), dim=-1).tolist() == [1.0, 4.0]


def test_k3_kl_matches_its_formula_and_is_zero_on_equal_policies() -> None:
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert kl_k3(logp, ref).item() == pytest.approx(math.exp(-1) + 1 - 1)
    assert kl_k3(ref, ref).item() == 0.0


def test_on_policy_loss_is_minus_the_mean_advantage_over_sampled_tokens() -> None:
    # ratio 1 everywhere: loss = -mean over sampled tokens of A.
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = policy_loss(logp, logp.detach(), torch.tensor([1.0, -2.0]), mask)
    assert out.loss.item() == pytest.approx(-(1 + 1 - 2) / 3)
    out.loss.backward()
    # d loss / d logp = -A / n_tokens on sampled tokens, 0 elsewhere (env tokens get no gradient).
    assert torch.allclose(logp.grad, torch.tensor([[-1 / 3, -1 / 3, 0], [2 / 3, 0, 0]]))
    assert out.metrics["tokens"] == 3 and out.metrics["clip_fraction"] == 0.0


def test_the_ratio_is_clipped_on_the_side_the_advantage_favours() -> None:
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_()
    # A > 0: ratio 1.5 clips to 1.2 (no gradient); ratio 0.5 is kept (min picks it).
    out = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), LossConfig(clip_low=0.2, clip_high=0.2))
    assert out.loss.item() == pytest.approx(-(1.2 + 0.5) / 2)
    out.loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5 / 2]]))
    assert out.metrics["clip_fraction"] == 0.5


def test_sequence_mean_and_constant_sum_aggregations() -> None:
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.tensor([1.0, -2.0])
    seq = policy_loss(logp, logp, adv, mask, LossConfig(aggregation="sequence_mean"))
    assert seq.loss.item() == pytest.approx(-(1.0 + -2.0) / 2)
    dr = policy_loss(logp, logp, adv, mask, LossConfig(aggregation="constant_sum", constant_sum_tokens=10))
    assert dr.loss.item() == pytest.approx(-(1 + 1 - 2) / (10 * 2))


def test_truncated_importance_weights_cap_the_ratio() -> None:
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    rollout = torch.log(torch.tensor([[0.1, 0.4]]))  # ratios 5 and 1.25
    mask = torch.ones(1, 2)
    truncated = importance_weights(old, rollout, mask, mode="truncate", cap=2.0)
    assert torch.allclose(truncated, torch.tensor([[2.0, 1.25]]))
    assert importance_weights(old, rollout, mask, mode="mask", cap=2.0).tolist() == [[0.0, 1.0]]
    # Sequence level: the product 5 * 1.25 = 6.25, over the cap for every token.
    assert importance_weights(old, rollout, mask, mode="mask", level="sequence").tolist() == [[0.0, 0.0]]
    assert importance_weights(old, rollout, mask, mode="none").tolist() == [[1.0, 1.0]]


def test_importance_weights_scale_the_loss() -> None:
    logp = torch.zeros(1, 2)
    rollout = torch.log(torch.tensor([[0.25, 1.0]]))  # ratios exp(0)/0.25 = 4 -> capped 2, and 1
    out = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), LossConfig(correction_cap=2.0),
                      rollout_logprobs=rollout)
    assert out.loss.item() == pytest.approx(-(2.0 + 1.0) / 2)
    assert out.metrics["is_weight_mean"] == pytest.approx(1.5)


def test_kl_penalty_needs_and_uses_the_reference() -> None:
    logp, ref = torch.zeros(1, 1), torch.full((1, 1), -1.0)
    with pytest.raises(ConfigError, match="needs ref_logprobs"):
        policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), LossConfig(kl_coef=0.1))
    out = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), LossConfig(kl_coef=0.1),
                      ref_logprobs=ref)
    assert out.loss.item() == pytest.approx(0.1 * math.exp(-1))
    assert out.metrics["kl"] == pytest.approx(math.exp(-1))


def test_bad_loss_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match="Setting loss.aggregation: Input should be 'token_mean'"):
        TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "aggregation": "mean"})
    with pytest.raises(ConfigError, match="Setting loss.clip_low: Input should be greater than or equal to 0"):
        TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "clip_low": -0.1})
    with pytest.raises(ConfigError, match="Setting experimental.negative_advantage_weight: Input should be less"):
        TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "negative_advantage_weight": 1.5})


def test_high_entropy_mask_keeps_the_top_share_of_the_masked_tokens() -> None:
    entropy = torch.tensor([[0.0, 0.9, 0.1, 0.5], [0.2, 0.0, 0.8, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # 7.0 is padding: never counted
    # Seven masked values; the 0.75 quantile lies between 0.5 and 0.8 (0.65): two are above it.
    assert high_entropy_mask(entropy, mask, 0.25).tolist() == [[0, 1, 0, 0], [0, 0, 1, 0]]
    assert high_entropy_mask(entropy, mask, 1.0).tolist() == mask.tolist()
    assert high_entropy_mask(entropy, mask, 0.0).tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]
    # Ties at the cut are all kept, as TRL does.
    ties = high_entropy_mask(torch.tensor([[1.0, 1.0, 1.0, 0.0]]), torch.ones(1, 4), 0.25)
    assert ties.tolist() == [[1, 1, 1, 0]]
    assert not high_entropy_mask(entropy, torch.zeros(2, 4), 0.2).any()
    with pytest.raises(ConfigError, match=r"top_entropy_quantile must be within \[0, 1\]"):
        high_entropy_mask(entropy, mask, 1.5)


def test_top_entropy_quantile_leaves_the_policy_term_to_the_uncertain_tokens() -> None:
    """The policy gradient reaches only the kept tokens, over the same denominator; the KL reaches all."""
    entropy = torch.tensor([[0.01, 1.2, 0.02, 0.03]])  # markup, the move, markup, markup
    mask = torch.ones(1, 4)
    logp = torch.zeros(1, 4, requires_grad=True)
    out = policy_loss(logp, logp.detach(), torch.tensor([2.0]), mask, LossConfig(top_entropy_quantile=0.25),
                      entropy=entropy)
    out.loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, -2.0 / 4, 0.0, 0.0])
    assert out.metrics["policy_token_share"] == pytest.approx(0.25)

    logp = torch.zeros(1, 4, requires_grad=True)
    ref = torch.full((1, 4), -1.0)
    policy_loss(logp, logp.detach(), torch.tensor([0.0]), mask,
                LossConfig(top_entropy_quantile=0.25, kl_coef=1.0), ref_logprobs=ref, entropy=entropy).loss.backward()
    # d/dlogp of k3 = 1 - exp(ref - logp) at every token, over 4 tokens.
    assert logp.grad[0].tolist() == pytest.approx([(1 - math.exp(-1)) / 4] * 4)

    with pytest.raises(ConfigError, match="needs the tokens' entropy"):
        policy_loss(logp, logp.detach(), torch.tensor([2.0]), mask, LossConfig(top_entropy_quantile=0.2))
    with pytest.raises(ConfigError, match="Setting loss.top_entropy_quantile: Input should be greater"):
        TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "top_entropy_quantile": -0.1})
    default = policy_loss(logp, logp.detach(), torch.tensor([2.0]), mask, LossConfig())
    assert default.metrics["policy_token_share"] == 1.0


def _gspo_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two sequences: log-ratios [0.1, 0.3] (A = 1) and [-0.5, -0.1, -0.3] then a padding token (A = -1)."""
    old = torch.full((2, 4), -1.0)
    logp = (old + torch.tensor([[0.1, 0.3, 0.0, 0.0], [-0.5, -0.1, -0.3, 0.0]])).requires_grad_()
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    return logp, old, mask


def test_gspo_clips_each_sequences_ratio() -> None:
    """Zheng et al. 2025 (GSPO), as verl's compute_policy_loss_gspo. Worked in NumPy:
    s0 = exp(mean(0.1, 0.3)) = exp(0.2) = 1.2214028 (inside [0.8, 1.28]: -s0 A = -1.2214028 per token);
    s1 = exp(mean(-0.5, -0.1, -0.3)) = exp(-0.3) = 0.7408182, A = -1: below 0.8, clipped: +0.8 per token.
    token_mean = (2 (-1.2214028) + 3 (0.8)) / 5 = -0.0085611; sequence_mean = (-1.2214028 + 0.8) / 2 = -0.2107014.
    """
    logp, old, mask = _gspo_case()
    config = LossConfig(policy_loss="gspo", clip_low=0.2, clip_high=0.28)
    out = policy_loss(logp, old, torch.tensor([1.0, -1.0]), mask, config)
    assert out.loss.item() == pytest.approx(-0.0085611033, abs=1e-7)
    out.loss.backward()
    # Each token of sequence 0: -A s0 / 5 tokens (its own log-prob's gradient times s0); sequence 1 is clipped.
    assert logp.grad.flatten().tolist() == pytest.approx([-0.2442806, -0.2442806, 0, 0, 0, 0, 0, 0], abs=1e-6)
    assert out.metrics["clip_fraction"] == pytest.approx(3 / 5)
    assert out.metrics["ratio_mean"] == pytest.approx((2 * 1.2214028 + 3 * 0.7408182) / 5)

    logp, old, mask = _gspo_case()
    per_sequence = policy_loss(logp, old, torch.tensor([1.0, -1.0]), mask,
                               config.model_copy(update={"aggregation": "sequence_mean"}))
    assert per_sequence.loss.item() == pytest.approx(-0.2107013791, abs=1e-7)
    per_sequence.loss.backward()
    # The paper's gradient: -A s0 / 2 sequences, spread over its 2 tokens (GSPO-token equals GSPO here).
    assert logp.grad[0, :2].tolist() == pytest.approx([-0.3053507] * 2, abs=1e-6)


def test_gspo_on_policy_is_the_plain_policy_gradient() -> None:
    """Before any update s = 1 in value, and each token's gradient is -A / tokens, as with the token clip."""
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    out = policy_loss(logp, logp.detach(), torch.tensor([2.0]), torch.ones(1, 3), LossConfig(policy_loss="gspo"))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-2.0)
    assert logp.grad[0].tolist() == pytest.approx([-2.0 / 3] * 3)


def test_cispo_weights_every_tokens_log_prob_by_its_clipped_ratio() -> None:
    """MiniMax-M1's CISPO: -sg(clip(r, 0.8, 1.28)) A log pi. Worked in NumPy: ratios [1.5, 0.5, 1.1] (old
    log-probs -1, so log pi = [-0.5945349, -1.6931472, -0.9046898]), A = 2, weights [1.28, 0.8, 1.1]:
    loss = -(2 / 3) (1.28 (-0.5945349) + 0.8 (-1.6931472) + 1.1 (-0.9046898)) = 2.0737875; the gradient
    -w A / 3 = [-0.8533333, -0.5333333, -0.7333333]: the clipped tokens keep theirs (PPO's clip gives the
    first none)."""
    old = torch.full((1, 3), -1.0)
    logp = (old + torch.log(torch.tensor([[1.5, 0.5, 1.1]]))).requires_grad_()
    out = policy_loss(logp, old, torch.tensor([2.0]), torch.ones(1, 3), LossConfig(policy_loss="cispo"))
    assert out.loss.item() == pytest.approx(2.0737874722, abs=1e-6)
    out.loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-0.8533333, -0.5333333, -0.7333333], abs=1e-6)
    assert out.metrics["clip_fraction"] == pytest.approx(2 / 3)

    clip_logp = logp.detach().clone().requires_grad_()
    policy_loss(clip_logp, old, torch.tensor([2.0]), torch.ones(1, 3), LossConfig()).loss.backward()
    assert clip_logp.grad[0].tolist() == pytest.approx([0.0, -0.5 * 2 / 3, -1.1 * 2 / 3], abs=1e-6)


def test_on_policy_the_three_losses_take_the_same_step() -> None:
    """With one update a step (pi_old is pi: every ratio 1) the clip, GSPO and CISPO all give each token
    -A / tokens: per-token advantages [2, -1, 0.5] over 3 tokens, gradient [-2/3, 1/3, -1/6]. So they
    differ only from the second update on the same rows (docs/results.md ran them with 4)."""
    advantages = torch.tensor([[2.0, -1.0, 0.5]])
    for name in ("clip", "gspo", "cispo"):
        logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
        policy_loss(logp, logp.detach(), advantages, torch.ones(1, 3), LossConfig(policy_loss=name)).loss.backward()
        assert logp.grad[0].tolist() == pytest.approx([-2 / 3, 1 / 3, -1 / 6], abs=1e-7), name


def test_an_unknown_policy_loss_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="Setting loss.policy_loss: Input should be 'clip', 'gspo' or 'cispo'"):
        TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "policy_loss": "ppo"})

"""REINFORCE++'s returns and advantages, and DAPO's overlong shaping, against values worked by hand."""

from __future__ import annotations

import pytest

from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.losses.advantages import reinforce_pp_advantages, reinforce_pp_returns
from agentgym.trainers.losses.shaping import episode_sampled_tokens, overlong_penalty


def _row(mask: list[int], reward: float, *, seed: int = 0, index: int = 0, row_index: int = 0) -> TrajectoryRow:
    return TrajectoryRow(episode_id=f"E/s{seed}/g{seed}/e{index}", group_id=seed, index_in_group=index,
                         row_index=row_index, env_id="E", seed=seed, prompt_ids=[1], completion_ids=[2] * len(mask),
                         completion_mask=mask, reward=reward)


def test_reinforce_pp_returns_run_back_from_the_last_sampled_token() -> None:
    """Hu 2025 (REINFORCE++), gamma 1: payments -0.5 k1 on sampled tokens, the reward at the last one:
    [-0.1, (env token), 0.05, -0.15 + 1] -> returns [0.8, 0, 0.9, 0.85]."""
    returns = reinforce_pp_returns(1.0, [0.2, 9.0, -0.1, 0.3], [1, 0, 1, 1], kl_coef=0.5)
    assert returns == pytest.approx([0.8, 0.0, 0.9, 0.85])
    assert reinforce_pp_returns(2.0, [0.0, 0.0], [1, 1], kl_coef=0.0) == pytest.approx([2.0, 2.0])
    assert reinforce_pp_returns(2.0, [0.0], [0], kl_coef=0.5) == [0.0]


def test_reinforce_pp_whitens_over_the_whole_step_not_per_group() -> None:
    """Episode A (two rows, reward 1), k1 [0.2, 0 | (env), 0.4], coef 0.5: payments [-0.1, 0, 0.8] ->
    returns [0.7, 0.8 | 0, 0.8]; episode B (its group's other, reward 0), k1 [0.2, -0.2, 0]: [0, 0.1, 0];
    a group of two equal rewards: left out; a lone episode C (reward 2): [2.0]. Worked in NumPy over
    the seven sampled returns x = [0.7, 0.8, 0.8, 0, 0.1, 0, 2]: mean 0.6285714, unbiased var 0.5023810,
    (x - mean) / sqrt(var + 1e-8) = [0.1007756, 0.2418614, 0.2418614, -0.8868252, -0.7457394, -0.8868252,
    1.9348915]."""
    rows = [_row([1, 1], 1.0), _row([0, 1], 1.0, row_index=1), _row([1, 1, 1], 0.0, index=1),
            _row([1], 0.5, seed=1), _row([1], 0.5, seed=1, index=1), _row([1], 2.0, seed=2)]
    kl = [[0.2, 0.0], [7.0, 0.4], [0.2, -0.2, 0.0], [0.0], [0.0], [0.0]]
    values = reinforce_pp_advantages(rows, kl, 0.5, filter_zero_variance=True)
    assert values[0] == pytest.approx([0.1007756, 0.2418614], abs=1e-6)
    assert values[1] == pytest.approx([0.0, 0.2418614], abs=1e-6)  # the env token carries nothing
    assert values[2] == pytest.approx([-0.8868252, -0.7457394, -0.8868252], abs=1e-6)
    assert values[3] is None and values[4] is None
    assert values[5] == pytest.approx([1.9348915], abs=1e-6)
    # Without the filter the equal group stays in, and the lone episode is kept either way.
    assert all(v is not None for v in reinforce_pp_advantages(rows, kl, 0.5))


@pytest.mark.parametrize("length,expected", [(10, 0.0), (12, 0.0), (13, -0.25), (15, -0.75), (16, -1.0),
                                             (17, -1.0), (100, -1.0)])
def test_overlong_penalty_grows_over_the_cache(length: int, expected: float) -> None:
    """Yu et al. 2025 (DAPO) Eq. 13, L_max 16, L_cache 4: 0 up to 12, (12 - length) / 4 up to 16, -1 past it."""
    assert overlong_penalty(length, 16, 4) == pytest.approx(expected)


def test_overlong_penalty_scales_and_a_zero_cache_is_the_hard_limit() -> None:
    assert overlong_penalty(14, 16, 4, penalty=2.0) == pytest.approx(-1.0)
    assert overlong_penalty(16, 16, 0) == 0.0 and overlong_penalty(17, 16, 0) == -1.0


def test_an_episodes_length_is_its_sampled_tokens_over_its_rows() -> None:
    rows = [_row([1, 1, 0], 1.0), _row([0, 1], 1.0, row_index=1), _row([1], 0.0, index=1)]
    assert episode_sampled_tokens(rows) == {"E/s0/g0/e0": 3, "E/s0/g0/e1": 1}

"""GAE at an episode's end: terminal, or cut and bootstrapped (issue 47, defect 2; worked by hand).

V = [0.6, 0.7, 0.8], reward 0 at every step, gamma 1, lambda 0.95.
Terminal (V after the last step 0): deltas [0.1, 0.1, -0.8], A_2 = -0.8, A_1 = 0.1 - 0.95 x 0.8 =
-0.66, A_0 = 0.1 - 0.95 x 0.66 = -0.527. Cut, V(s_T) = 0.85: deltas [0.1, 0.1, 0.05], A_2 = 0.05,
A_1 = 0.1 + 0.95 x 0.05 = 0.1475, A_0 = 0.1 + 0.95 x 0.1475 = 0.240125.
"""

from __future__ import annotations

import pytest

from agentgym.trainers.learners.ppo import bootstrap_value, token_level_targets, turn_level_targets
from agentgym.trainers.losses.value import gae, token_gae

VALUES = [0.6, 0.7, 0.8]


def test_a_terminal_end_counts_nothing_after_it() -> None:
    advantages, returns = gae([0.0, 0.0, 0.0], VALUES, 1.0, 0.95)
    assert advantages == pytest.approx([-0.527, -0.66, -0.8])
    assert returns == pytest.approx([0.073, 0.04, 0.0])


def test_a_cut_episode_bootstraps_from_the_value_of_its_last_state() -> None:
    advantages, returns = gae([0.0, 0.0, 0.0], VALUES, 1.0, 0.95, last_value=0.85)
    assert advantages == pytest.approx([0.240125, 0.1475, 0.05])
    assert returns == pytest.approx([0.840125, 0.8475, 0.85])
    # Token level: env tokens (mask 0) are no steps and get 0.
    per_token, _ = token_gae([0.6, 9.0, 0.7, 0.8], [1, 0, 1, 1], 0.0, 1.0, 0.95, last_value=0.85)
    assert per_token == pytest.approx([0.240125, 0.0, 0.1475, 0.05])


def test_which_ends_bootstrap(make_row) -> None:
    ended = make_row(reward=0.0).model_copy(update={"terminated": True, "truncated": False})
    cut = make_row(reward=0.0).model_copy(update={"terminated": False, "truncated": True,
                                                  "stop_reason": "turn_budget"})
    assert bootstrap_value(ended, 0.85) == 0.0
    assert bootstrap_value(cut, 0.85) == 0.85


def test_ppo_targets_bootstrap_a_cut_episode(make_row) -> None:
    row = make_row("<answer>Dragon</answer>", reward=0.0)
    sampled = [i for i, bit in enumerate(row.completion_mask) if bit]
    values = [0.0] * len(row.completion_ids)
    for i, value in zip(sampled[-3:], VALUES):
        values[i] = value
    for i in sampled[:-3]:
        values[i] = 0.6  # earlier steps: the same value as the first of the three, so their deltas are 0
    cut = token_level_targets([row], [values], 1.0, 0.95, last_value=0.85)[0]
    assert [cut.advantages[i] for i in sampled[-3:]] == pytest.approx([0.240125, 0.1475, 0.05])
    ended = token_level_targets([row], [values], 1.0, 0.95)[0]
    assert [ended.advantages[i] for i in sampled[-3:]] == pytest.approx([-0.527, -0.66, -0.8])
    # Turn level: one turn, its value read at its first token, the value after it bootstrapped.
    turn = turn_level_targets([row], [values], 1.0, 0.95, last_value=0.85)[0]
    first = row.turns[0].start
    assert turn.advantages[first] == pytest.approx(0.85 - values[first])

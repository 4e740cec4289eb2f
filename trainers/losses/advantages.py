"""Advantages: how much better each sampled token did than its baseline.

Pure functions of rewards (group-relative, leave-one-out, per turn) and of a step's rows (one
advantage per completion token), shared by every learner and backend and tested on numbers
worked by hand.

Departures from the papers, on purpose:
- GRPO scales by the group's *sample* std (``correction=1``), as TRL does.
- Dr. GRPO (Liu et al. 2025) drops the std (``dr_grpo``: r - mean); its length
  normalisation is the policy loss's ``constant_sum`` aggregation.
- REINFORCE++ (Hu 2025, as OpenRLHF's ``reinforce`` estimator; ``reinforce_pp``) has no group
  baseline: each sampled token's return-to-go (gamma 1) of the episode's reward less ``kl_coef``
  times the k1 of every sampled token from it on, whitened over the step's sampled tokens
  (:func:`reinforce_pp_advantages`). An episode of several turns is one response: its reward comes
  at its last sampled token, env tokens are no steps.

GiGPO's turn-level term and the other options that lost their comparisons are in
:mod:`agentgym.trainers.research`, off this path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow, TurnSpan
from agentgym.trainers.losses.settings import AdvantageMethod, Baseline
from agentgym.trainers.losses.value import masked_whiten

__all__ = [
    "discounted_returns",
    "episode_turns",
    "group_advantages",
    "group_key",
    "matched_turns",
    "playing_baseline_advantages",
    "playing_turn_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_returns",
    "row_advantages",
    "rows_by_episode",
    "token_advantages",
    "zero_variance_groups",
]


def _grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ConfigError(f"rewards must be one value per sequence (1-D), got shape {tuple(rewards.shape)}.")
    if group_size < 1 or rewards.numel() % group_size:
        raise ConfigError(
            f"{rewards.numel()} rewards do not split into groups of {group_size}; "
            "rows must come in whole groups (episodes_per_step a multiple of group_size)."
        )
    return rewards.view(-1, group_size)


def group_advantages(rewards: torch.Tensor, group_size: int, method: AdvantageMethod = "grpo",
                     eps: float = 1e-4) -> torch.Tensor:
    """One advantage per sequence, relative to the other sequences of its group.

    - ``grpo``: (r - mean) / (std + eps)
    - ``grpo_no_std`` and ``dr_grpo``: r - mean
    - ``rloo``: r - mean of the *other* members (leave one out)

    (``reinforce_pp`` has no group baseline: :func:`reinforce_pp_advantages`.)
    """
    grouped = _grouped(rewards.float(), group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    if method == "grpo":
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
        advantages = (grouped - mean) / (std + eps)
    elif method in ("grpo_no_std", "dr_grpo"):
        advantages = grouped - mean
    elif method == "rloo":
        if group_size < 2:
            raise ConfigError("rloo needs group_size >= 2: each sample's baseline is the others' mean.")
        advantages = (grouped - mean) * group_size / (group_size - 1)
    else:
        raise ConfigError(f"Unknown advantage method {method!r}; use grpo, grpo_no_std, dr_grpo or rloo.")
    return advantages.reshape(-1)


def discounted_returns(rewards: Sequence[float], discount: float) -> list[float]:
    """Each turn's return-to-go: ``G_t = r_t + discount * G_{t+1}`` (GiGPO's Eq. 5)."""
    returns = [0.0] * len(rewards)
    running = 0.0
    for turn in range(len(rewards) - 1, -1, -1):
        running = rewards[turn] + discount * running
        returns[turn] = running
    return returns


def playing_baseline_advantages(returns: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each turn's return-to-go against the other episodes of its group still playing at that turn.

    ``returns[i][t]`` is episode i's return-to-go from its turn t. Turn t of
    episode i gets ``returns[i][t]`` minus the mean of ``returns[j][t]`` over
    the other episodes j that played a turn t (leave one out, as RLOO). Why: in
    a multi-turn env the failed episodes are often the long ones (they run to
    the turn limit), so with one advantage per episode their late turns, which
    no won episode reaches, are all pushed down, and the tokens every turn
    shares (the answer's markup, a move the policy is sure of) with them: in
    every batch the same way, though the push cancels in expectation. Against
    the episodes still playing, the advantages of each turn index sum to zero
    across the group, so that push is gone, and a turn after which nothing
    differed (all that still play fail alike) gets 0. The baseline of episode
    i's turn comes from the other episodes only, so the policy gradient stays
    unbiased. A turn that no other episode reached keeps the baseline of the
    last turn that one did; a lone episode gets 0 throughout.
    """
    length = max(map(len, returns), default=0)
    totals = [sum(r[turn] for r in returns if len(r) > turn) for turn in range(length)]
    counts = [sum(len(r) > turn for r in returns) for turn in range(length)]
    advantages: list[list[float]] = []
    for own in returns:
        if not own or counts[0] < 2:  # no other episode played: nothing to compare with
            advantages.append([0.0] * len(own))
            continue
        baseline, values = 0.0, []
        for turn, value in enumerate(own):
            if counts[turn] > 1:  # always at turn 0; later, none left: keep the last turn's baseline
                baseline = (totals[turn] - value) / (counts[turn] - 1)
            values.append(float(value) - baseline)
        advantages.append(values)
    return advantages


def zero_variance_groups(rewards: torch.Tensor, group_size: int, atol: float = 1e-6) -> torch.Tensor:
    """A bool per sequence: True where every member of its group got the same reward.

    Such a group has zero advantage everywhere and only dilutes the batch
    (DAPO's dynamic sampling drops it).
    """
    grouped = _grouped(rewards.float(), group_size)
    spread = grouped.max(dim=1).values - grouped.min(dim=1).values
    return (spread <= atol).repeat_interleave(group_size)


def group_key(row: TrajectoryRow) -> tuple[str, int, int]:
    return row.env_id, row.seed, row.group_id


def row_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo",
                   *, filter_zero_variance: bool = False) -> list[float | None]:
    """One advantage per row from its episode's reward against its group's.

    An episode split into several rows gives each of them its advantage. A
    group is every episode sharing (env, seed, group_id); groups may differ in
    size. With ``filter_zero_variance`` a group whose rewards are all equal
    gets ``None`` (skip it: its advantage is zero everywhere), and so does a lone
    episode; without it, they get 0.
    """
    episodes: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    for row in rows:
        episodes[group_key(row)][row.episode_id] = row.reward
    skipped = None if filter_zero_variance else 0.0  # a filtered group's value
    by_episode: dict[str, float | None] = {}
    for members in episodes.values():
        rewards = torch.tensor(list(members.values()), dtype=torch.float64)
        equal_rewards = filter_zero_variance and float(rewards.max() - rewards.min()) <= 1e-6
        if len(members) < 2 or equal_rewards:
            by_episode.update(dict.fromkeys(members, skipped))
            continue
        advantages = group_advantages(rewards, len(members), method).tolist()
        by_episode.update(zip(members, advantages))
    return [by_episode[row.episode_id] for row in rows]


def rows_by_episode(rows: Sequence[TrajectoryRow]) -> dict[str, list[TrajectoryRow]]:
    episodes: dict[str, list[TrajectoryRow]] = defaultdict(list)
    for row in rows:
        episodes[row.episode_id].append(row)
    return {key: sorted(parts, key=lambda r: r.row_index) for key, parts in episodes.items()}


def episode_turns(parts: Sequence[TrajectoryRow]) -> list[TurnSpan]:
    return [span for part in parts for span in part.turns]


def matched_turns(first: TrajectoryRow, parts: Sequence[TrajectoryRow]) -> bool:
    """Whether every turn the rows record has its reward (an error between sampling and stepping
    leaves the last turn without one)."""
    turns = [span.turn for span in episode_turns(parts)]
    return turns == list(range(len(first.turn_rewards)))


def playing_turn_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo"
                            ) -> dict[str, list[float]]:
    """Each turn's advantage against the episodes of its group still playing at that turn, by episode id.

    :func:`~agentgym.trainers.losses.playing_baseline_advantages` on the
    turns' undiscounted returns-to-go, within each group as :func:`row_advantages`
    forms them. With ``method="grpo"`` a group's values are divided by the
    standard deviation of its episodes' rewards, as GRPO scales its episode
    advantages; the other methods leave them as they are. An episode whose turns
    cannot be matched to its tokens is left out: it keeps its episode advantage.
    """
    groups: dict[tuple[str, int, int], list[tuple[str, list[float], float]]] = defaultdict(list)
    for episode_id, parts in rows_by_episode(rows).items():
        first = parts[0]
        if matched_turns(first, parts):
            groups[group_key(first)].append((episode_id, discounted_returns(first.turn_rewards, 1.0), first.reward))
    result: dict[str, list[float]] = {}
    for members in groups.values():
        values = playing_baseline_advantages([returns for _, returns, _ in members])
        scale = 1.0
        if method == "grpo" and len(members) > 1:
            spread = float(torch.tensor([reward for *_, reward in members], dtype=torch.float64).std())
            scale = 1.0 / (spread + 1e-4) if spread > 1e-6 else 1.0  # equal rewards: no scale to take
        for (episode_id, _, _), per_turn in zip(members, values):
            result[episode_id] = [value * scale for value in per_turn]
    return result


def token_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo", *,
                     filter_zero_variance: bool = False, baseline: Baseline = "episode"
                     ) -> list[list[float] | None]:
    """One advantage per completion token of each row (None: skip the row).

    Every sampled token gets its episode's advantage (:func:`row_advantages`); env tokens get 0
    (they carry no loss). ``baseline="turn"``: each turn's tokens get, instead, the turn's
    against the episodes still playing (:func:`playing_turn_advantages`); the filter still
    decides by the episodes' rewards.
    """
    episode_level = row_advantages(rows, method, filter_zero_variance=filter_zero_variance)
    playing = playing_turn_advantages(rows, method) if baseline == "turn" else {}
    values: list[list[float] | None] = []
    for row, advantage in zip(rows, episode_level):
        if advantage is None:
            values.append(None)
            continue
        tokens = [0.0] * len(row.completion_ids)
        own = playing.get(row.episode_id)
        for span in row.turns:
            base = own[span.turn] if own is not None and span.turn < len(own) else advantage
            tokens[span.start:span.end] = [base] * (span.end - span.start)
        values.append(tokens)
    return values



def reinforce_pp_returns(reward: float, kl: Sequence[float], mask: Sequence[int], kl_coef: float) -> list[float]:
    """REINFORCE++'s per-token return-to-go (gamma 1) over an episode's completion tokens: each sampled
    token (``mask`` 1) is paid ``-kl_coef * kl`` (k1 = log pi - log pi_ref), the last one also ``reward``;
    a sampled token's return is the sum of its own payment and every later one's. Env tokens get 0."""
    steps = [i for i, sampled in enumerate(mask) if sampled]
    payments = [-kl_coef * kl[i] for i in steps]
    if payments:
        payments[-1] += reward
    returns = [0.0] * len(mask)
    for i, value in zip(steps, discounted_returns(payments, 1.0)):
        returns[i] = value
    return returns


def reinforce_pp_advantages(rows: Sequence[TrajectoryRow], kl: Sequence[Sequence[float]] | None = None,
                            kl_coef: float = 0.0, *, filter_zero_variance: bool = False,
                            eps: float = 1e-8) -> list[list[float] | None]:
    """REINFORCE++ (``grpo.advantage=reinforce_pp``): one advantage per completion token of each row
    (None: skip the row), the returns of :func:`reinforce_pp_returns` whitened over every sampled token
    of the step (one mean and std for the batch, no group's).

    ``kl``: per row, the k1 of each completion token (None: no KL). An episode split into rows is one
    sequence of tokens, its rows in order. With ``filter_zero_variance`` a group of two or more
    episodes whose rewards are all equal is left out (None); a lone episode is kept (it has no group).
    """
    index = {id(row): i for i, row in enumerate(rows)}
    rewards: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    for row in rows:
        rewards[group_key(row)][row.episode_id] = row.reward
    returns: list[list[float] | None] = [None] * len(rows)
    for parts in rows_by_episode(rows).values():
        group = list(rewards[group_key(parts[0])].values())
        if filter_zero_variance and len(group) > 1 and max(group) - min(group) <= 1e-6:
            continue
        mask = [int(m) for part in parts for m in part.completion_mask]
        per_token_kl = ([float(x) for part in parts for x in kl[index[id(part)]]] if kl is not None
                        else [0.0] * len(mask))
        values = reinforce_pp_returns(parts[0].reward, per_token_kl, mask, kl_coef)
        at = 0
        for part in parts:
            returns[index[id(part)]] = values[at:at + len(part.completion_mask)]
            at += len(part.completion_mask)
    kept = [(i, values) for i, values in enumerate(returns) if values is not None]
    if not kept:
        return returns
    flat = torch.tensor([v for _, values in kept for v in values], dtype=torch.float64)
    mask = torch.tensor([float(m) for i, _ in kept for m in rows[i].completion_mask], dtype=torch.float64)
    whitened = (masked_whiten(flat, mask, eps) * mask).tolist()
    at = 0
    for i, values in kept:
        returns[i] = whitened[at:at + len(values)]
        at += len(values)
    return returns

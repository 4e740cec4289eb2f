"""What the experimental options do: GiGPO's turn term, the extra filter, the negative weight, SFT's
length-grouped batches (see :mod:`agentgym.trainers.research`)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.losses.advantages import (
    discounted_returns,
    episode_turns,
    group_advantages,
    group_key,
    matched_turns,
    rows_by_episode,
)
from agentgym.trainers.losses.settings import AdvantageMethod
from agentgym.trainers.research.settings import ExperimentalSettings

__all__ = ["anchor_advantages", "length_grouped_order", "research_advantages",
           "sft_order", "turn_advantages", "turn_credit_share"]


def research_advantages(rows: Sequence[TrajectoryRow], advantages: list[list[float] | None],
                        settings: ExperimentalSettings, method: AdvantageMethod = "grpo"
                        ) -> tuple[list[list[float] | None], dict[str, float]]:
    """GRPO's per-token advantages with the experimental options applied, and their metrics.

    A group left out (None) by either filter comes back when GiGPO gives one of its turns an
    advantage: it is skipped only when neither level has anything to teach.
    """
    values = list(advantages)
    if settings.filter_uniform_success:
        outcomes: dict[tuple[str, int, int], set[bool]] = defaultdict(set)
        for row in rows:
            outcomes[group_key(row)].add(row.success)
        values = [None if len(outcomes[group_key(row)]) == 1 else value for row, value in zip(rows, values)]
    metrics: dict[str, float] = {}
    if settings.turn_advantage_weight > 0:
        per_turn = turn_advantages(rows, method, settings.turn_discount)
        values = _with_turn_term(rows, values, per_turn, settings.turn_advantage_weight)
        metrics["turn_credit_share"] = turn_credit_share(per_turn)
    if settings.negative_advantage_weight != 1.0:
        weight = settings.negative_advantage_weight
        values = [None if v is None else [a * weight if a < 0 else a for a in v] for v in values]
    return values, metrics


def _with_turn_term(rows: Sequence[TrajectoryRow], values: list[list[float] | None],
                    per_turn: dict[str, list[float]], weight: float) -> list[list[float] | None]:
    """GiGPO's combination: each turn's tokens plus ``weight`` times its turn's advantage."""
    rescued: set[tuple[str, int, int]] = set()  # filtered groups with a turn-level signal
    combined: list[list[float]] = []
    for row, value in zip(rows, values):
        tokens = list(value) if value is not None else [0.0] * len(row.completion_ids)
        turns = per_turn.get(row.episode_id, [])
        for span in row.turns:
            extra = weight * turns[span.turn] if span.turn < len(turns) else 0.0
            if value is None and abs(extra) > 1e-9:
                rescued.add(group_key(row))
            tokens[span.start:span.end] = [a + extra for a in tokens[span.start:span.end]]
        combined.append(tokens)
    return [None if value is None and group_key(row) not in rescued else tokens
            for row, value, tokens in zip(rows, values, combined)]


def anchor_advantages(returns: Sequence[float], anchors: Sequence[Hashable],
                      method: AdvantageMethod = "grpo") -> list[float]:
    """GiGPO's turn-level advantage: each turn's return against the other turns taken from the same state.

    ``anchors[i]`` names the state turn ``i`` acted in (its observation); the
    turns sharing an anchor form a group, and :func:`group_advantages` with
    ``method`` compares their returns. A turn whose state no other turn saw
    gets 0: nothing to compare it with. So in a state the policy keeps coming
    back to (a move that changes nothing, played again and again), the move that
    broke out and won is pushed up against the ones that stayed, even inside
    an episode that won overall.
    """
    if len(returns) != len(anchors):
        raise ConfigError(f"{len(returns)} returns but {len(anchors)} anchors: one anchor per turn.")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for turn, anchor in enumerate(anchors):
        members[anchor].append(turn)
    advantages = [0.0] * len(returns)
    for turns in members.values():
        if len(turns) < 2:
            continue
        values = torch.tensor([returns[t] for t in turns], dtype=torch.float64)
        for turn, advantage in zip(turns, group_advantages(values, len(turns), method).tolist()):
            advantages[turn] = advantage
    return advantages


def turn_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo",
                    discount: float = 0.95) -> dict[str, list[float]]:
    """GiGPO's turn-level advantage of every turn, by episode id.

    Within a group (as :func:`row_advantages` forms them), the turns taken from
    the same observation are compared by their discounted return-to-go
    (:func:`~agentgym.trainers.losses.anchor_advantages`). An episode whose
    turns cannot be matched to its tokens (an error between sampling and
    stepping leaves a turn with no reward) gets zeros: only its episode-level
    advantage.
    """
    anchors: dict[tuple[str, int, int], list[tuple[str, int, str, float]]] = defaultdict(list)
    result: dict[str, list[float]] = {}
    for episode_id, parts in rows_by_episode(rows).items():
        first = parts[0]
        result[episode_id] = [0.0] * len(first.turn_rewards)
        if not matched_turns(first, parts):
            continue
        returns = discounted_returns(first.turn_rewards, discount)
        for span in episode_turns(parts):
            anchors[group_key(first)].append((episode_id, span.turn, span.observation_hash, returns[span.turn]))
    for members in anchors.values():
        values = anchor_advantages([m[3] for m in members], [m[2] for m in members], method)
        for (episode_id, turn, _, _), value in zip(members, values):
            result[episode_id][turn] = value
    return result


def turn_credit_share(per_turn: dict[str, list[float]]) -> float:
    """The share of turns with a turn-level advantage (:func:`turn_advantages`) other than 0.

    How much of a step GiGPO reaches: a turn gets credit of its own only when
    another turn of its group acted on the same observation and fared differently.
    """
    turns = [value for values in per_turn.values() for value in values]
    return sum(abs(value) > 1e-9 for value in turns) / max(len(turns), 1)


def sft_order(lengths: Sequence[int], *, batch_size: int, samples: int, seed: int,
              settings: ExperimentalSettings) -> list[int] | None:
    """SFT's row order when ``group_by_length`` asks for batches of similar length; None otherwise."""
    if not settings.group_by_length:
        return None
    return length_grouped_order(lengths, batch_size=batch_size, samples=samples, seed=seed)


def length_grouped_order(lengths: Sequence[int], *, batch_size: int, samples: int, seed: int,
                         window: int = 50) -> list[int]:
    """The first ``samples`` row indices of batches of similar length, the batches in random order.

    Each pass is shuffled and cut into windows of ``window`` batches; a window is sorted by length and
    cut into batches, and the pass's batches are shuffled, so consecutive steps still see every length.
    """
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < samples:
        rows = list(range(len(lengths)))
        rng.shuffle(rows)
        rows = rows[:len(rows) - len(rows) % batch_size]
        batches: list[list[int]] = []
        for start in range(0, len(rows), window * batch_size):
            chunk = sorted(rows[start:start + window * batch_size], key=lambda i: lengths[i])
            batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        order += [i for batch in batches for i in batch]
    return order[:samples]

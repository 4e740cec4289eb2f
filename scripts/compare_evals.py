#!/usr/bin/env python
"""Compare two evals level by level, from the episodes ``agentgym eval --episodes-out`` wrote.

    python scripts/compare_evals.py runs/sokoban6/eval_sft.parquet runs/sokoban6/eval_grpo.parquet
    python scripts/compare_evals.py a_0.parquet,a_1.parquet b.parquet --turns
    python scripts/compare_evals.py sft_1000.parquet grpo_1000.parquet --first 200

Both evals must have played the same seeds (the same ``--seed-offset`` and
``--episodes``); an eval run in parts is given as its files joined by commas.
Prints each side's success rate, the levels only one side solved, and the exact
two-sided McNemar test on those (the binomial test of the discordant pairs):
two models that each solve 85% can still differ on 30 levels, and only the
paired count says whether one is better. ``--turns`` adds what the turns of the
failed episodes did, read from the first line of each env reply (Sokoban's
notes: moved, pushed a box, a wall is in the way, the box cannot move, or a
complaint about the format).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow, first_rows
from agentgym.rollout.storage import read_rows


def episodes_by_seed(paths: str) -> dict[int, TrajectoryRow]:
    """One row per episode (its first), keyed by level seed, over comma-separated files."""
    episodes: dict[int, TrajectoryRow] = {}
    for path in paths.split(","):
        try:
            rows = read_rows(path)
        except ConfigError as exc:  # not a rollout file: the one line that says what it is
            raise SystemExit(f"error: {exc}") from None
        if not rows:
            raise SystemExit(f"No episodes in {path}: give the file `agentgym eval --episodes-out` wrote.")
        episodes.update((row.seed, row) for row in first_rows(rows))
    return episodes


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs against a fair coin."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def turn_kind(reply: str) -> str:
    """What a Sokoban turn did, from the env's reply to it."""
    first = reply.split("\n", 1)[0]
    if "wall is in the way" in first:
        return "wall"
    if "cannot move" in first:
        return "stuck box"
    if "pushed a box" in first:
        return "pushed"
    if ": moved" in first:
        return "moved"
    return "unreadable"


def failed_turn_kinds(episodes: dict[int, TrajectoryRow]) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for row in episodes.values():
        if not row.success:
            replies = [m.content for m in row.messages if m.role == "user"][1:]
            kinds.update(turn_kind(reply) for reply in replies)
    return kinds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the first eval's episode file(s), comma separated")
    parser.add_argument("b", help="the second eval's episode file(s), comma separated")
    parser.add_argument("--turns", action="store_true", help="count what the turns of failed episodes did")
    parser.add_argument("--first", type=int, metavar="N",
                        help="only the N levels of lowest seed (an eval of 1000 levels holds the one of 200)")
    args = parser.parse_args()
    a, b = episodes_by_seed(args.a), episodes_by_seed(args.b)
    if args.first is not None:
        keep = set(sorted(a)[:args.first])
        a = {seed: row for seed, row in a.items() if seed in keep}
        b = {seed: row for seed, row in b.items() if seed in keep}
    if set(a) != set(b):
        print(f"The evals played different levels ({len(set(a) ^ set(b))} seeds in one only): "
              "run both with the same --seed-offset and --episodes.", file=sys.stderr)
        return 2
    only_a = sum(a[s].success and not b[s].success for s in a)
    only_b = sum(b[s].success and not a[s].success for s in a)
    for name, side in (("A", a), ("B", b)):
        solved = sum(row.success for row in side.values())
        print(f"{name}: {solved}/{len(side)} solved ({100 * solved / len(side):.1f}%)")
    p_value = mcnemar_exact(only_a, only_b)
    print(f"only A solved: {only_a}, only B solved: {only_b}, exact McNemar p = {p_value:.2g}")
    if args.turns:
        for name, side in (("A", a), ("B", b)):
            kinds = failed_turn_kinds(side)
            print(f"{name} failed-episode turns: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Compare a GRPO run with its control step by step, from the two runs' ``metrics.jsonl``.

    python scripts/compare_runs.py runs/sokoban6/grpo_control runs/sokoban6/grpo
    python scripts/compare_runs.py CONTROL RUN --metric reward --from-step 3

The control is the run's own command with ``--lr 0``: it cannot learn, and with the same
``--seed`` it plays the same levels with the same sampling seeds, step by step, so each of
the run's steps pairs with the control's. The levels of one step can be much easier than
the next one's (success swings by 40 points between steps), which no single run can tell
from learning; the pairing removes it. Prints both runs' mean of the metric over the steps
they share (from ``--from-step``, 2 by default; step 1, numbered as the console numbers
them, is the start model in both, so it should match), how many of those steps the run
was above and below its control, and the exact two-sided
sign test on that count. For ``success``, where the runs log each step's ``episodes``, it
also counts the episodes each run won; ``--blocks K`` splits the shared steps into K runs
of consecutive steps and prints each one's counts, to show whether a gap opens over time.
Where both runs wrote ``episodes.jsonl`` (``agentgym train`` does), the same episode of
the two runs (the same id: level, place in its group, sampling seed) pairs, and the
episodes only one of them won get an exact McNemar test: until the weights part, the two
play alike, so the episodes they differ on say more than the steps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compare_evals import mcnemar_exact  # the same exact binomial test, on steps instead of levels

from agentgym.trainers.loop.metrics import EPISODES_FILE, read_jsonl


def step_metrics(run: str) -> dict[int, dict[str, float]]:
    """Each logged step's metrics of a run folder (a resumed run's last record of a step wins)."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"No {path}: give the --out folder of an `agentgym train` run.")
    return {int(record["step"]): record for record in read_jsonl(path)}


def shared_steps(control: dict[int, dict[str, float]], run: dict[int, dict[str, float]], metric: str,
                 from_step: int) -> list[int]:
    """The steps from ``from_step`` on that both runs logged ``metric`` for (a non-finite value is logged as null)."""
    def logged(record: dict[str, float]) -> bool:
        return isinstance(record.get(metric), (int, float))

    return sorted(s for s in set(control) & set(run) if s >= from_step and logged(control[s]) and logged(run[s]))


def episode_outcomes(run: str, steps: list[int]) -> dict[tuple[int, str], bool]:
    """Each episode's success over ``steps``, by (step, episode id); empty without episodes.jsonl."""
    wanted = set(steps)
    return {(int(r["step"]), str(r["episode_id"])): bool(r["success"])
            for r in read_jsonl(Path(run) / EPISODES_FILE) if int(r["step"]) in wanted}


def paired_episodes(control: str, run: str, steps: list[int]) -> str | None:
    """The McNemar line on the episodes both runs played over ``steps``; None when either has no log."""
    control_won, run_won = episode_outcomes(control, steps), episode_outcomes(run, steps)
    shared = control_won.keys() & run_won.keys()
    if not shared:
        return None
    only_run = sum(run_won[key] and not control_won[key] for key in shared)
    only_control = sum(control_won[key] and not run_won[key] for key in shared)
    return (f"episodes paired by id: {len(shared)}; won only by the run: {only_run}, only by the control: "
            f"{only_control}, exact McNemar p = {mcnemar_exact(only_run, only_control):.2g}")


def episodes_won(records: dict[int, dict[str, float]], steps: list[int]) -> tuple[int, int] | None:
    """(episodes won, episodes played) over ``steps``; None when a step did not log ``episodes``."""
    if not all(isinstance(records[s].get("episodes"), (int, float)) for s in steps):
        return None
    played = sum(records[s]["episodes"] for s in steps)
    won = sum(records[s]["episodes"] * records[s]["success"] for s in steps)
    return round(won), round(played)


def blocks(steps: list[int], count: int) -> list[list[int]]:
    """``steps`` cut into ``count`` runs of consecutive steps, as even as they go (fewer when short)."""
    count = max(1, min(count, len(steps)))
    size, extra = divmod(len(steps), count)
    cuts, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        cuts.append(steps[start:end])
        start = end
    return cuts


def means_line(control: dict[int, dict[str, float]], run: dict[int, dict[str, float]], steps: list[int],
               metric: str) -> str:
    """The metric's mean over ``steps`` in each run."""
    mean_control = sum(control[s][metric] for s in steps) / len(steps)
    mean_run = sum(run[s][metric] for s in steps) / len(steps)
    return f"{metric} {mean_run:.4g} against the control's {mean_control:.4g}"


def wins_line(control: dict[int, dict[str, float]], run: dict[int, dict[str, float]], steps: list[int]) -> str | None:
    """The episodes each run won over ``steps``; None when either did not log ``episodes``."""
    run_counts, control_counts = episodes_won(run, steps), episodes_won(control, steps)
    if run_counts is None or control_counts is None:
        return None
    (won, played), (control_won, _) = run_counts, control_counts
    return (f"episodes won: run {won} of {played} ({won / max(played, 1):.1%}), "
            f"control {control_won} ({control_won / max(played, 1):.1%})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("control", help="the control's run folder (the same command with --lr 0)")
    parser.add_argument("run", help="the run's folder")
    parser.add_argument("--metric", default="success", help="the metric to pair (default: success)")
    parser.add_argument("--from-step", type=int, default=2,
                        help="the first step to count (default: 2; step 1 is the start model in both)")
    parser.add_argument("--blocks", type=int, default=0, help="also print the counts of K runs of consecutive steps")
    args = parser.parse_args()
    control, run = step_metrics(args.control), step_metrics(args.run)
    if 1 in control and 1 in run:
        print(f"step 1 (the start model in both): control {control[1].get(args.metric)}, run {run[1].get(args.metric)}")
    steps = shared_steps(control, run, args.metric, args.from_step)
    if not steps:
        print(f"The runs share no step from {args.from_step} on with {args.metric!r} logged.", file=sys.stderr)
        return 2
    above = sum(run[s][args.metric] > control[s][args.metric] for s in steps)
    below = sum(run[s][args.metric] < control[s][args.metric] for s in steps)
    print(f"steps {steps[0]} to {steps[-1]} ({len(steps)} shared): {means_line(control, run, steps, args.metric)}")
    print(f"steps above the control: {above}, below: {below}, exact sign test p = {mcnemar_exact(above, below):.2g}")
    counting = args.metric == "success"  # wins and pairs are counts of won episodes
    if counting and (wins := wins_line(control, run, steps)):
        print(wins)
    if counting and (paired := paired_episodes(args.control, args.run, steps)):
        print(paired)
    for block in blocks(steps, args.blocks) if args.blocks > 0 else []:
        line = (counting and wins_line(control, run, block)) or means_line(control, run, block, args.metric)
        print(f"  steps {block[0]} to {block[-1]}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

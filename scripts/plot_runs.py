#!/usr/bin/env python
"""Curves of several runs side by side, per step and per hour, from their ``metrics.jsonl``.

    python scripts/plot_runs.py runs/a/sync runs/a/async --labels synchronous asynchronous \\
        --metric success --out docs/images/async_bandit.png

Left: the metric at each step (per episode, since every step plays as many); right: the
same against the run's own wall clock (the cumulative ``time/step``, or the ``minutes``
that examples/trl_grpo_baseline.py logs), which is where an asynchronous run should gain. A moving mean over ``--window`` steps smooths both.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compare_runs import step_metrics


def moving_mean(values: list[float], window: int) -> list[float]:
    """The mean of each value and the ``window - 1`` before it (fewer at the start)."""
    return [sum(values[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def curve(run: str, metric: str, window: int) -> tuple[list[int], list[float], list[float]]:
    """(steps, hours since the start, smoothed metric) of the steps that logged the metric."""
    records = step_metrics(run)
    steps, hours, values, elapsed = [], [], [], 0.0
    for step in sorted(records):
        if "minutes" in records[step]:  # examples/trl_grpo_baseline.py logs its clock, not each step's time
            elapsed = float(records[step]["minutes"]) * 60
        else:
            elapsed += float(records[step].get("time/step") or 0.0)
        if records[step].get(metric) is not None:
            steps.append(step)  # numbered from 1, as the console shows them
            hours.append(elapsed / 3600)
            values.append(float(records[step][metric]))
    return steps, hours, moving_mean(values, window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run folders (agentgym train --out)")
    parser.add_argument("--labels", nargs="+", help="a name per run (default: the folders)")
    parser.add_argument("--metric", default="success")
    parser.add_argument("--window", type=int, default=5, help="steps in the moving mean")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args()
    labels = args.labels or args.runs
    if len(labels) != len(args.runs):
        raise SystemExit(f"--labels names {len(labels)} runs, but {len(args.runs)} were given.")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_step, by_time) = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for run, label in zip(args.runs, labels):
        steps, hours, values = curve(run, args.metric, args.window)
        by_step.plot(steps, values, label=label)
        by_time.plot([h * 60 for h in hours], values, label=label)
    by_step.set_xlabel("step")
    by_time.set_xlabel("minutes of the run (its own clock)")
    by_step.set_ylabel(f"{args.metric} (mean of {args.window} steps)")
    for axes in (by_step, by_time):
        axes.grid(alpha=0.3)
    by_step.legend()
    figure.suptitle(args.title or args.metric)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""SFT step time against ``sft_passes``: a batch sorted by length and run as several forward passes.

Run:  .venv/bin/python benchmarks/bench_sft.py [--trajectories demos.parquet] [--episodes 512]
                                               [--model tiny-128x4] [--steps 8] [--passes 1,2,4,8]

Without ``--trajectories`` it first writes ``--episodes`` of the Sokoban recipe's noisy
demonstrations (6x6, 1 box, ``--expert-noise 0.25``) with ``agentgym rollout --policy
solver``, the rows the recipe's SFT learns from: their lengths vary (a few hundred to
a few thousand tokens), so a batch drawn at random pads to its longest row. Each setting
trains the same model from the same weights on random batches (``--steps`` steps of 16,
after one untimed step; the planned order for ``sft_passes`` above 1, TRL's sampler for 1)
and the table gives the seconds a step and the tokens the forward passes read per real
(unpadded) token. The same step in fewer padded tokens is the whole point: the
loss is the batch's token mean in every setting (tests/trainers/test_sft.py checks the weights).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentgym.rollout.storage import read_rows
from agentgym.trainers.sft import load_model_and_tokenizer, sft_dataset, sft_train

SOKOBAN = ["--env", "Sokoban-LLM-v0", "-k", "dim_room=[6,6]", "-k", "num_boxes=1", "-k", "brief=true",
           "-k", "show_positions=true"]


def write_demos(path: Path, episodes: int, model: str) -> None:
    subprocess.run([sys.executable, "-m", "agentgym", "rollout", *SOKOBAN, "--policy", "solver",
                    "--expert-noise", "0.25", "--model", model, "--episodes", str(episodes),
                    "--out", str(path), "--show", "0"], check=True, stdout=subprocess.DEVNULL)


def time_passes(dataset: Any, model_name: str, passes: int, steps: int, out: Path) -> tuple[float, float]:
    """Seconds a step (the first step untimed) and forward tokens read per real token."""
    model, tokenizer = load_model_and_tokenizer(model_name)
    read: list[tuple[int, int]] = []  # (tokens the pass reads, of them real)
    model.register_forward_pre_hook(
        lambda _m, _a, kw: read.append((kw["input_ids"].numel(), int(kw["attention_mask"].sum()))),
        with_kwargs=True)
    times: list[float] = []

    def on_step(_step: int, _log: dict[str, float]) -> None:
        times.append(time.perf_counter())

    sft_train(model, tokenizer, dataset, out=out, steps=steps + 1, lr=1e-3, batch_size=16, passes=passes,
              on_step=on_step)
    per_step = (times[-1] - times[0]) / steps
    return per_step, sum(total for total, _ in read) / max(sum(real for _, real in read), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trajectories", help="a rollout file to learn from (default: write Sokoban demos)")
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--model", default="tiny-128x4")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--passes", default="1,2,4,8")
    args = parser.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per model load between the table's rows
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.trajectories) if args.trajectories else Path(tmp) / "demos.parquet"
        if not args.trajectories:
            write_demos(path, args.episodes, args.model)
        dataset = sft_dataset(read_rows(path), only_successful=True)
        lengths = sorted(len(ids) for ids in dataset["input_ids"])
        print(f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; "
              f"{len(dataset)} rows, tokens: mean {sum(lengths) / len(lengths):.0f}, "
              f"median {lengths[len(lengths) // 2]}, longest {lengths[-1]}")
        print("| sft_passes | s / step (batch of 16) | forward tokens / real token |")
        print("| ---: | ---: | ---: |")
        for passes in (int(p) for p in args.passes.split(",")):
            seconds, padding = time_passes(dataset, args.model, passes, args.steps, Path(tmp) / f"run{passes}")
            print(f"| {passes} | {seconds:.2f} | {padding:.2f} |", flush=True)


if __name__ == "__main__":
    main()

"""SFT step time against ``sft_passes``: a batch sorted by length and run as several forward passes.

Run:  .venv/bin/python benchmarks/bench_sft.py [--trajectories demos.parquet] [--episodes 512]
                                               [--model tiny-128x4] [--steps 8] [--passes 1,2,4,8] [--backend trl]

Without ``--trajectories`` it first writes ``--episodes`` of the Sokoban recipe's noisy
demonstrations (6x6, 1 box, ``--expert-noise 0.25``) with ``agentgym rollout --policy
solver``, the rows the recipe's SFT learns from: their lengths vary (a few hundred to
a few thousand tokens), so a batch drawn at random pads to its longest row. Each setting
trains the same model from the same weights on the same random batches (``--steps`` steps
of 16, after one untimed step; :class:`~agentgym.trainers.loop.sources.SFTBatches`' order, the SFT
learner on ``--backend``'s engine) and the table gives the seconds a step and the tokens the forward passes read per real
(unpadded) token. The same step in fewer padded tokens is the whole point: the
loss is the batch's token mean in every setting (tests/trainers/learners/test_sft.py checks the weights).
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

from agentgym.trainers.engines.distributed import init_distributed
from agentgym.trainers.registry import build_learner
from agentgym.trainers.settings import TrainConfig
from agentgym.trainers.loop.sources import SFTBatches

SOKOBAN = ["--env", "Sokoban-LLM-v0", "-k", "dim_room=[6,6]", "-k", "num_boxes=1", "-k", "brief=true",
           "-k", "show_positions=true"]


def write_demos(path: Path, episodes: int, model: str) -> None:
    subprocess.run([sys.executable, "-m", "agentgym", "rollout", *SOKOBAN, "--policy", "solver",
                    "--expert-noise", "0.25", "--model", model, "--episodes", str(episodes),
                    "--out", str(path), "--show", "0"], check=True, stdout=subprocess.DEVNULL)


def sft_config(path: Path, model_name: str, backend: str, passes: int, steps: int, out: Path) -> TrainConfig:
    return TrainConfig.from_dict({"trainer": "sft", "backend": backend, "trajectories": str(path), "model": model_name,
                                  "steps": steps + 1, "lr": 1e-3, "micro_batch_size": 16, "sft_passes": passes,
                                  "out": str(out)})


def time_passes(config: TrainConfig, batches: SFTBatches, steps: int) -> tuple[float, float]:
    """Seconds a step (the first step untimed) and forward tokens read per real token."""
    learner = build_learner(config, init_distributed("auto"))
    read: list[tuple[int, int]] = []  # (tokens the pass reads, of them real)

    def count(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        ids, mask = kwargs["input_ids"], kwargs.get("attention_mask")
        read.append((ids.numel(), int(mask.sum()) if mask is not None else ids.numel()))

    learner.engine.model.register_forward_pre_hook(count, with_kwargs=True)
    learner.train_step(batches.rows_of_step(0))  # untimed
    started = time.perf_counter()
    for step in range(1, steps + 1):
        learner.train_step(batches.rows_of_step(step))
    per_step = (time.perf_counter() - started) / steps
    return per_step, sum(total for total, _ in read) / max(sum(real for _, real in read), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trajectories", help="a rollout file to learn from (default: write Sokoban demos)")
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--model", default="tiny-128x4")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--passes", default="1,2,4,8")
    parser.add_argument("--backend", default="trl", choices=["trl", "fsdp"])
    args = parser.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per model load between the table's rows
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.trajectories) if args.trajectories else Path(tmp) / "demos.parquet"
        if not args.trajectories:
            write_demos(path, args.episodes, args.model)
        batches = SFTBatches(sft_config(path, args.model, args.backend, 1, args.steps, Path(tmp) / "rows"))
        lengths = sorted(len(row.prompt_ids) + len(row.completion_ids) for row in batches.rows)
        print(f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; "
              f"{len(batches.rows)} rows, tokens: mean {sum(lengths) / len(lengths):.0f}, "
              f"median {lengths[len(lengths) // 2]}, longest {lengths[-1]}; {args.backend} engine")
        print("| sft_passes | s / step (batch of 16) | forward tokens / real token |")
        print("| ---: | ---: | ---: |")
        for passes in (int(p) for p in args.passes.split(",")):
            config = sft_config(path, args.model, args.backend, passes, args.steps, Path(tmp) / f"run{passes}")
            seconds, padding = time_passes(config, batches, args.steps)
            print(f"| {passes} | {seconds:.2f} | {padding:.2f} |", flush=True)


if __name__ == "__main__":
    main()

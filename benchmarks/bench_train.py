"""Training throughput: the native FSDP backend against TRL's GRPOTrainer on the same rows; the weight sync.

Run:  .venv/bin/python benchmarks/bench_train.py [--model tiny] [--rows 64] [--prompt 200] [--completion 48]
                                                 [--micro-batch 16] [--steps 3] [--skip-trl]

Both trainers get the same fixed trajectory rows (``--rows`` sequences in
groups of 8, ``--prompt`` prompt tokens and ``--completion`` sampled tokens
each, rewards drawn once with a seed) and do the same work per optimiser
step: one forward and backward pass per micro-batch of ``--micro-batch``
sequences, gradients accumulated over all the rows, one AdamW step. No
generation, no KL, no importance correction, one update per batch. TRL's
rollout_func hands it the rows; the FSDP trainer takes them directly.
"tokens/s" counts every token read (prompt + completion) per second of
optimiser steps, after one untimed warm-up step.

The weight sync is the FSDP trainer's full weights gathered, written as
safetensors and loaded by the built-in server (``POST /update_weights``),
end to end, as the training loop does after every step.

Target (issue 6): the FSDP backend at least as fast as TRL's on the same work.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import random
import tempfile
import time

import torch

from agentgym.models import resolve_model
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.fsdp import FSDPTrainer

GROUP = 8


def fixed_rows(model_dir: str, count: int, prompt: int, completion: int, seed: int = 0) -> list[TrajectoryRow]:
    """``count`` rows of random ids (specials excluded), completions ending in eos, seeded rewards."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    rows = []
    for n in range(count):
        ids = [rng.choice(vocab) for _ in range(prompt + completion - 1)] + [tokenizer.eos_token_id]
        rows.append(TrajectoryRow(
            episode_id=f"bench/{n}", group_id=n // GROUP, index_in_group=n % GROUP, env_id="Bench-v0",
            seed=n // GROUP, prompt_ids=ids[:prompt], completion_ids=ids[prompt:],
            completion_mask=[1] * completion, logprobs=[-1.0] * completion, reward=rng.random(),
            num_turns=1, terminated=True, policy_version=0))
    return rows


def _config(args: argparse.Namespace, **changes: object) -> TrainConfig:
    return dataclasses.replace(TrainConfig(
        env_id="Bandit-LLM-v0", model=args.model, group_size=GROUP, episodes_per_step=args.rows,
        micro_batch_size=args.micro_batch, micro_batch_tokens=args.micro_batch * (args.prompt + args.completion),
        filter_zero_variance=False, correction="none", kl_coef=0.0, lr=1e-5, lr_schedule="constant",
        format_warmup_episodes=0, dtype=args.dtype, out=tempfile.mkdtemp(prefix="bench-train-")), **changes)


def bench_fsdp(args: argparse.Namespace, rows: list[TrajectoryRow], *, pack: bool) -> tuple[float, FSDPTrainer]:
    trainer = FSDPTrainer(_config(args, pack_sequences=pack))
    trainer.train_step(rows)  # warm-up
    _sync_device()
    started = time.perf_counter()
    for _ in range(args.steps):
        trainer.train_step(rows)
    _sync_device()
    return (time.perf_counter() - started) / args.steps, trainer


def bench_trl(args: argparse.Namespace, rows: list[TrajectoryRow]) -> float:
    """Seconds per TRL GRPOTrainer optimiser step on the same rows (the trl backend's helper)."""
    from agentgym.trainers.trl_backend import trl_train_on_rows

    result = trl_train_on_rows(_config(args, backend="trl"), rows, steps=args.steps + 1)  # +1: warm-up
    return float(result["seconds"]) / float(result["steps"])


def bench_sync(trainer: FSDPTrainer, pushes: int) -> tuple[float, float]:
    """Mean seconds of gather + write + load into the built-in server, and the size in MB."""
    from agentgym.serve.launch import BuiltinServer
    from agentgym.trainers.sync import make_weight_sync

    with BuiltinServer(trainer.model_path) as server:
        sync = make_weight_sync("builtin", server.url, model_name=server.model_name)
        try:
            sync.push(trainer.full_weights())  # warm-up
            started = time.perf_counter()
            size = 0
            for _ in range(pushes):
                size = sync.push(trainer.full_weights()).bytes
            return (time.perf_counter() - started) / pushes, size / 1e6
        finally:
            sync.close()


def _sync_device() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny, tiny-<hidden>x<layers> or a folder")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=200)
    parser.add_argument("--completion", type=int, default=48)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--pushes", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--skip-trl", action="store_true")
    args = parser.parse_args()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    model_dir = resolve_model(args.model)
    rows = fixed_rows(model_dir, args.rows, args.prompt, args.completion)
    tokens = args.rows * (args.prompt + args.completion)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {os.cpu_count()} cores"
    results = []
    padded, trainer = bench_fsdp(args, rows, pack=False)
    results.append(("fsdp (padded)", padded))
    print(f"{args.model}: {sum(p.numel() for p in trainer.model.parameters()) / 1e6:.1f}M "
          f"parameters, {args.dtype}; {args.rows} rows x ({args.prompt} prompt + {args.completion} completion) "
          f"tokens, micro-batch {args.micro_batch}; {device}; Python {platform.python_version()}, "
          f"torch {torch.__version__}")
    packed, _ = bench_fsdp(args, rows, pack=True)
    results.append(("fsdp (packed)", packed))
    if not args.skip_trl:
        results.append(("trl GRPOTrainer", bench_trl(args, rows)))
    print("\n| trainer | s / optimiser step | tokens/s |\n| --- | ---: | ---: |")
    for name, seconds in results:
        print(f"| {name} | {seconds:.3f} | {tokens / seconds:,.0f} |")
    seconds, megabytes = bench_sync(trainer, args.pushes)
    print(f"\n| weight sync to the built-in server | ms / push | MB |\n| --- | ---: | ---: |\n"
          f"| gather + safetensors + /update_weights | {seconds * 1000:.0f} | {megabytes:.1f} |")


if __name__ == "__main__":
    main()

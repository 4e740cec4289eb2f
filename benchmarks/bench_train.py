"""Training throughput: GRPO's learner on the native (fsdp) engine against the trl engine on the same rows;
the weight sync.

Run:  .venv/bin/python benchmarks/bench_train.py [--model tiny] [--rows 64] [--prompt 200] [--completion 48]
                                                 [--micro-batch 16] [--steps 3] [--skip-trl] [--device auto]

Both engines run the same learner (:class:`~agentgym.trainers.learners.grpo.GRPOLearner`)
on the same fixed trajectory rows (``--rows`` sequences in groups of 8,
``--prompt`` prompt tokens and ``--completion`` sampled tokens each, rewards
drawn once with a seed), so they do the same work per optimiser step: one
forward and backward pass per micro-batch of ``--micro-batch`` sequences,
gradients accumulated over all the rows, one AdamW step. No generation, no KL,
no importance correction, one update per batch. Only the engine differs: the
native one (padded or packed) or the trl one (TRL's SFTTrainer as a component:
accelerate's backward and clipping, TRL's log-softmax).
"tokens/s" counts every token read (prompt + completion) per second of
optimiser steps, after one untimed warm-up step.

The weight sync is the learner's full weights gathered, written as
safetensors and loaded by the built-in server (``POST /update_weights``),
end to end, as the run skeleton does after every step.

Target (issue 6): the native engine at least as fast as the trl one on the same work.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time

import torch

from agentgym.models import resolve_model
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.engines.distributed import init_distributed
from agentgym.trainers.learners.grpo import GRPOLearner
from agentgym.trainers.registry import build_learner
from agentgym.trainers.settings import TrainConfig

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


def _config(args: argparse.Namespace, backend: str, **changes: object) -> TrainConfig:
    values: dict[str, object] = {
        "env_id": "Bandit-LLM-v0", "backend": backend, "model": args.model, "group_size": GROUP,
        "episodes_per_step": args.rows, "micro_batch_size": args.micro_batch, "filter_zero_variance": False,
        "correction": "none", "kl_coef": 0.0, "lr": 1e-5, "lr_schedule": "constant", "format_warmup_episodes": 0,
        "dtype": args.dtype, "out": tempfile.mkdtemp(prefix="bench-train-")}
    if backend == "fsdp":
        values["micro_batch_tokens"] = args.micro_batch * (args.prompt + args.completion)
    return TrainConfig.from_dict({**values, **changes})


def bench_learner(args: argparse.Namespace, rows: list[TrajectoryRow], backend: str,
                  **changes: object) -> tuple[float, GRPOLearner]:
    """Seconds per optimiser step of GRPO's learner on ``backend``'s engine, and the learner."""
    learner = build_learner(_config(args, backend, **changes), init_distributed(args.device))
    assert isinstance(learner, GRPOLearner)
    learner.train_step(rows)  # warm-up
    _sync_device()
    started = time.perf_counter()
    for _ in range(args.steps):
        learner.train_step(rows)
    _sync_device()
    return (time.perf_counter() - started) / args.steps, learner


def bench_sync(learner: GRPOLearner, pushes: int) -> tuple[float, float]:
    """Mean seconds of gather + write + load into the built-in server, and the size in MB."""
    from agentgym.serve.launch import BuiltinServer
    from agentgym.trainers.loop.sync import make_weight_sync

    with BuiltinServer(learner.engine.model_path) as server:
        sync = make_weight_sync("builtin", server.url, model_name=server.model_name, api_key=server.api_key)
        try:
            sync.push(learner.weights())  # warm-up
            started = time.perf_counter()
            size = 0
            for _ in range(pushes):
                size = sync.push(learner.weights()).bytes
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
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu or cuda")
    args = parser.parse_args()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    model_dir = resolve_model(args.model)
    rows = fixed_rows(model_dir, args.rows, args.prompt, args.completion)
    tokens = args.rows * (args.prompt + args.completion)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {os.cpu_count()} cores"
    results = []
    padded, learner = bench_learner(args, rows, "fsdp", pack_sequences=False)
    results.append(("fsdp engine (padded)", padded))
    print(f"{args.model}: {sum(p.numel() for p in learner.engine.model.parameters()) / 1e6:.1f}M "
          f"parameters, {args.dtype}; {args.rows} rows x ({args.prompt} prompt + {args.completion} completion) "
          f"tokens, micro-batch {args.micro_batch}; {device}; Python {platform.python_version()}, "
          f"torch {torch.__version__}")
    packed, _ = bench_learner(args, rows, "fsdp", pack_sequences=True)
    results.append(("fsdp engine (packed)", packed))
    if not args.skip_trl:
        results.append(("trl engine", bench_learner(args, rows, "trl")[0]))
    print("\n| trainer | s / optimiser step | tokens/s |\n| --- | ---: | ---: |")
    for name, seconds in results:
        print(f"| {name} | {seconds:.3f} | {tokens / seconds:,.0f} |")
    seconds, megabytes = bench_sync(learner, args.pushes)
    print(f"\n| weight sync to the built-in server | ms / push | MB |\n| --- | ---: | ---: |\n"
          f"| gather + safetensors + /update_weights | {seconds * 1000:.0f} | {megabytes:.1f} |")


if __name__ == "__main__":
    main()

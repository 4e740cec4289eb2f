"""Peak memory of one training step, per trainer, on a real model (issue 46): what a step holds.

Run:  .venv/bin/python benchmarks/bench_memory.py [--model smollm2-135m] [--env Wordle-LLM-v0]
                                                  [--episodes 8] [--trainers grpo,grpo-trl,ppo,...]
                                                  [--set micro_batch_size=16 ...]

First it writes ``--episodes`` rows of ``--env`` played by the env's random well-formed policy and
tokenized with the model's own chat template (real lengths: Wordle's are 600 to 1,000 tokens
with SmolLM2's template; no model is needed to play them). Then each trainer takes one offline
step on those rows (``agentgym train --trajectories``, 8 episodes, the settings' defaults unless
``--set``) in a fresh process, and the table gives that process's peak resident memory (its
``ru_maxrss``), the step's seconds and the tokens it read. A process that dies (out of memory)
is a row too. The model is loaded in float32, as the trainers load it.

To measure another checkout (the code before a change), run this file with that checkout's
interpreter and ``PYTHONPATH``; it uses the command line only, so any version that has
``agentgym train`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: trainer label -> its flags (one step, 8 episodes in groups of 4, offline)
TRAINERS = {
    "grpo": ["--trainer", "grpo", "--backend", "fsdp"],
    "grpo-trl": ["--trainer", "grpo", "--backend", "trl"],
    "ppo": ["--trainer", "ppo", "--backend", "fsdp"],
    "ppo-critic": ["--trainer", "ppo", "--backend", "fsdp", "-s", "value_model=critic"],
    "dpo": ["--trainer", "dpo", "--backend", "fsdp"],
    "dpo-trl": ["--trainer", "dpo", "--backend", "trl"],
    "sft": ["--trainer", "sft", "--backend", "trl"],
    "distill": ["--trainer", "distill", "--backend", "fsdp", "-s", "teacher={model}"],
}


#: trainers that read rows, not groups (they refuse the group settings): they take every row
_NO_GROUPS = frozenset({"sft", "distill"})


def write_rows(path: Path, env: str, episodes: int, model: str) -> None:
    """``episodes`` of the env's random well-formed policy, tokenized with ``model``'s chat template,
    in groups of 4 with rewards that differ (so every trainer has something to learn)."""
    code = f"""
import asyncio
from agentgym.models import resolve_model
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.storage import RolloutWriter
from transformers import AutoTokenizer
renderer = ChatRenderer(AutoTokenizer.from_pretrained(resolve_model({model!r})))
config = RolloutConfig(env_id={env!r}, episodes={episodes}, group_size=4, concurrency=1, seed=0,
                       max_context_tokens=4096, max_tokens_per_turn=64)
rows = asyncio.run(EnvManager(config, RandomPolicy(seed=0), renderer=renderer).run())
for i, row in enumerate(rows):
    row.reward, row.success = float(i % 4) / 3, i % 4 == 3
with RolloutWriter({str(path)!r}) as writer:
    writer.add(rows)
print(max(len(r.prompt_ids) + len(r.completion_ids) for r in rows), sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    longest, total = done.stdout.split()[-2:]
    print(f"{episodes} rows of {env}: the longest {longest} tokens, {total} in all.")


def one_step(label: str, flags: list[str], rows: Path, model: str, extra: list[str], out: Path) -> dict[str, object]:
    """One offline step of a trainer in a fresh process: its peak RSS and seconds."""
    command = [sys.executable, "-m", "agentgym", "train", *[f.format(model=model) for f in flags],
               "--trajectories", str(rows), "--model", model, "--steps", "1",
               *([] if label in _NO_GROUPS else ["--group-size", "4", "--episodes-per-step", "8"]),
               "--out", str(out / label), *extra]
    code = ("import resource, subprocess, sys, time, json\n"
            "start = time.perf_counter()\n"
            f"done = subprocess.run({command!r}, capture_output=True, text=True)\n"
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
            "print(json.dumps({'rc': done.returncode, 'peak_kb': peak, 'seconds': time.perf_counter() - start,"
            " 'tail': (done.stdout + done.stderr)[-400:]}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="Wordle-LLM-v0")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--trainers", default=",".join(TRAINERS))
    parser.add_argument("--set", "-s", action="append", default=[], help="settings for every trainer, NAME=VALUE")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    rows = work / "rows.parquet"
    write_rows(rows, args.env, args.episodes, args.model)
    extra = [part for setting in args.set for part in ("-s", setting)]
    print(f"{platform.node()}: {os.cpu_count()} cores, {resource.getrlimit(resource.RLIMIT_AS)[0]} AS limit; "
          f"load {os.getloadavg()[0]:.1f}; code {os.environ.get('PYTHONPATH') or 'installed'}; "
          f"settings {args.set or 'defaults'}")
    print("| trainer | peak RSS (GB) | seconds | result |")
    print("| --- | ---: | ---: | --- |")
    for label in args.trainers.split(","):
        started = time.perf_counter()
        result = one_step(label, TRAINERS[label], rows, args.model, extra, work)
        seconds = time.perf_counter() - started
        status = "ok" if result["rc"] == 0 else f"exit {result['rc']}: {str(result['tail']).splitlines()[-1][:80]}"
        print(f"| {label} | {int(result['peak_kb']) / 1024 ** 2:.2f} | {seconds:.0f} | {status} |", flush=True)


if __name__ == "__main__":
    main()

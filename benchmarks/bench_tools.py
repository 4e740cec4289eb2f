"""What the tool layer costs: parsing an action, and a step through the ToolWrapper.

Run:  .venv/bin/python benchmarks/bench_tools.py [--repeats 2000] [--python-runs 100]

Pins itself to one CPU core. "parse" times ``parse_tool_calls`` on typical
actions. "step" times one step of the fake Echo env: bare, through the
wrapper with no tool call (the cost every env turn pays), a tool turn with a
pure-Python tool (the wrapper's own cost), and a python tool turn over the
local sandbox next to the bare ``sandbox.run`` of the same code (the tool's
overhead on top of the sandbox). Medians and p99 in microseconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agentgym.sandbox import LocalSandbox
from agentgym.tools import FunctionTool, PythonTool, ToolWrapper, parse_tool_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakes import EchoEnv  # noqa: E402  (the tests' fake env, the smallest there is)

CODE = "print(sum(range(1000)))"
ACTIONS = {
    "answer, no call (60 chars)": "I think the word is the one I saw. <answer>stone</answer>",
    "tag call": f"Let me compute it.\n<python>\n{CODE}\n</python>",
    "JSON call": f'<tool_call>{{"name": "python", "arguments": {{"code": "{CODE}"}}}}</tool_call>',
    "8 KB prose, no call": "The quick brown fox jumps over the lazy dog. " * 180,
}


def peek(word: str) -> str:
    """Spell a word backwards."""
    return word[::-1]


def timed(function: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        function()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def row(label: str, samples: list[float]) -> str:
    p99 = statistics.quantiles(samples, n=100)[98] if len(samples) > 1 else samples[0]
    return f"| {label} | {statistics.median(samples):,.1f} | {p99:,.1f} |"


def stepper(env: EchoEnv | ToolWrapper, action: str) -> Callable[[], object]:
    """A step of ``action`` that resets (inside the timing, cheaply) when the episode ends."""
    env.reset(seed=0)

    def step() -> None:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset(seed=0)
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--python-runs", type=int, default=100)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    print(f"# bench_tools: {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, one core (microseconds)\n")
    print("| case | median | p99 |")
    print("|---|---:|---:|")
    tools = [PythonTool(), FunctionTool(peek)]
    for label, action in ACTIONS.items():
        print(row(f"parse: {label}", timed(lambda a=action: parse_tool_calls(a, tools), args.repeats)))
    wrong = "<answer>nope</answer>"
    big = EchoEnv(max_turns=10**9)
    print(row("step: bare env", timed(stepper(big, wrong), args.repeats)))
    wrapped = ToolWrapper(EchoEnv(max_turns=10**9), [FunctionTool(peek)], max_calls=10**9)
    print(row("step: wrapped env, no call", timed(stepper(wrapped, wrong), args.repeats)))
    print(row("step: tool turn, pure-Python tool", timed(stepper(wrapped, "<peek>abc</peek>"),
                                                         args.repeats)))
    with LocalSandbox() as sandbox:
        python = ToolWrapper(EchoEnv(), [PythonTool(sandbox)], max_calls=10**9)
        print(row(f"sandbox.run ({sandbox.name})", timed(lambda: sandbox.run(CODE), args.python_runs)))
        print(row("step: tool turn, python tool", timed(stepper(python, f"<python>{CODE}</python>"),
                                                        args.python_runs)))


if __name__ == "__main__":
    main()

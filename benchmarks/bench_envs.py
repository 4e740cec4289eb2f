"""Median reset and step time of every game, as a table; then Code-LLM-v0's step latency.

Run:  .venv/bin/python benchmarks/bench_envs.py [--resets 300] [--steps 3000]
          [--code-steps 20] [--code-backends local,docker] [--math-steps 50] [--web-episodes 200]
          [--huge-repeats 3]

Pins itself to one CPU core. "raw" times the env itself (``env.unwrapped``);
"gym.make" times it through the wrappers Gymnasium adds (order enforcing, the
passive env checker), which is what most users hold. A reset includes
generating the level. Steps play random well-formed moves (the env's
``random_action``), resetting (untimed) when an episode ends.
Target for Sokoban 6x6 with 1 box: reset under 1 ms, step under 20 us.

The retrieval tables (``--retrieval-passages 100000 --retrieval-queries 2000
--searchqa-steps 300``; 0 passages skips them; needs the ``retrieval`` extra)
time building a BM25 index of a generated corpus, saving and loading it, one
query at a time (top 3) over it and over the default world's corpus, both a
title (the key phrase an agent searches) and a whole question (which holds
frequent words, so it reads long posting lists), then SearchQA-LLM-v0's
reset, search turn and answer turn through ``gym.make``.

The code table times one ``step`` of Code-LLM-v0 per kind of answer, through a
sandbox opened once (the env's own sandbox is shared the same way): each
answer that holds code is one sandbox run of the test harness, which forks
once per test (7 tests for two_sum and sum_pairs). The sandbox's processes
inherit the one-core pin. A backend that cannot run here gets a row saying why.

The math table times Math-LLM-v0 steps per kind of answer, in the main thread
(math-verify in-process) and from a worker thread as the rollout manager
steps envs (the check goes to the checking child process), then
ReasoningGym-LLM-v0 resets and steps for a few tasks.

The huge-action table steps every registered env (through ``gym.make``, so
the tool-wrapped ones through their ToolWrapper) with 10 MB actions of several
kinds (one letter; letters, numbers or a tool call inside the env's own
format; opening tags), and shows the slowest kind: its median step with the
env's action cap (``max_action_chars``, 65,536 characters by default), the same
kind of action at 100 characters (what a short one costs: for code, a sandbox
run), whether the length added under 50 ms (the target), and one step with the
cap lifted (seconds; the parsers themselves should be linear in the length).

The web table times WebShop-LLM-v0 calls per kind of action in scripted
episodes that buy the right item: the env's own server answers on 127.0.0.1
from a thread of this process (so on the same pinned core), and the page is
parsed into the text view. With playwright and Debian's chromium installed,
the Chromium backend gets rows too (a tenth of the episodes).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from agentgym.envs.code import CodeEnv
from agentgym.sandbox import open_sandbox

import agentgym
from agentgym.core import TextEnv
from agentgym.errors import SandboxUnavailable

CASES: list[tuple[str, dict]] = [
    ("Sokoban-LLM-v0", {}),
    ("Sokoban-LLM-v0", {"dim_room": 7, "num_boxes": 2}),
    ("Sokoban-LLM-v0", {"dim_room": 10, "num_boxes": 3}),
] + [(info.id, {}) for info in agentgym.list_envs(family="games") if info.id != "Sokoban-LLM-v0"] + [
    ("Sudoku-LLM-v0", {"size": 9}),
]


def _p90(samples: list[float]) -> float:
    """The 90th percentile of ``samples`` (the one sample when there is only one)."""
    return statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else samples[0]


def time_resets(env: gym.Env, count: int) -> list[float]:
    samples = []
    for seed in range(count):
        start = time.perf_counter_ns()
        env.reset(seed=seed)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def time_steps(env: gym.Env, count: int) -> list[float]:
    rng = np.random.default_rng(0)
    game = env.unwrapped
    samples, seed = [], 0
    env.reset(seed=seed)
    while len(samples) < count:
        action = game.random_action(rng)
        start = time.perf_counter_ns()
        _, _, terminated, truncated, _ = env.step(action)
        samples.append((time.perf_counter_ns() - start) / 1000)
        if terminated or truncated:
            seed += 1
            env.reset(seed=seed)
    return samples


_FENCE = "```"
_TWO_SUM = ("def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n"
            "        if target - x in seen:\n            return [seen[target - x], j]\n"
            "        seen[x] = j")
# (label, problem, answer): what a step is timed on.
CODE_CASES = [
    ("no code (format feedback)", "two_sum", "I would use a hash map."),
    ("syntax error (parsed here)", "two_sum",
     f"{_FENCE}python\ndef two_sum(nums, target)\n{_FENCE}"),
    ("right function, 7 tests", "two_sum", f"{_FENCE}python\n{_TWO_SUM}\n{_FENCE}"),
    ("crashing function, 7 tests", "two_sum",
     f"{_FENCE}python\ndef two_sum(nums, target):\n    return nums[99]\n{_FENCE}"),
    ("right program (stdin), 7 tests", "sum_pairs",
     (f"{_FENCE}python\nimport sys\nd = sys.stdin.read().split()\n"
      f"print(*(int(d[i]) + int(d[i + 1]) for i in range(1, len(d), 2)), sep='\\n')\n{_FENCE}")),
]


def time_code_steps(env: CodeEnv, problem_id: str, answer: str, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        env.reset(seed=0, options={"problem_id": problem_id})
        start = time.perf_counter_ns()
        env.step(answer)
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


def code_table(backends: list[str], count: int) -> None:
    print(f"\n# Code-LLM-v0: one step, {count} per answer (milliseconds)\n")
    print("| sandbox | answer | median | p90 |")
    print("|---|---|---:|---:|")
    for backend in backends:
        try:
            sandbox = open_sandbox(backend=backend)
        except SandboxUnavailable as exc:
            print(f"| {backend} | unavailable: {str(exc).splitlines()[0][:80]} | | |")
            continue
        with sandbox:
            env = CodeEnv(sandbox=sandbox)
            time_code_steps(env, "two_sum", CODE_CASES[2][2], 2)  # warm the pool / page cache
            for label, problem_id, answer in CODE_CASES:
                samples = time_code_steps(env, problem_id, answer, count)
                print(f"| {sandbox.name} | {label} | {statistics.median(samples):,.1f} "
                      f"| {_p90(samples):,.1f} |")


# (label, i -> (answer, reference), share of --math-steps). Every step gets new text:
# math-verify caches its last parses, and a rollout rarely repeats an answer.
MATH_CASES = [
    ("no answer (format feedback)", lambda i: ("I am not sure.", str(i)), 1.0),
    ("right, integer", lambda i: (rf"\boxed{{{100 + i}}}", str(100 + i)), 1.0),
    ("right, decimal vs \\frac", lambda i: (f"<answer>{(2 * i + 1) / 4}</answer>",
                                          rf"\frac{{{2 * i + 1}}}{{4}}"), 1.0),
    ("wrong, fraction vs \\frac", lambda i: (rf"\boxed{{{2 * i + 1}/3}}",
                                          rf"\frac{{{2 * i + 1}}}{{4}}"), 1.0),
    ("right, expanded vs (x+i)^2", lambda i: (rf"\boxed{{x^2+{2 * i + 2}x+{(i + 1) ** 2}}}",
                                              f"(x+{i + 1})^2"), 1.0),
    ("runaway 9^{9^{9^9}} (cut at 1 s)", lambda i: (r"\boxed{9^{9^{9^{9}}}}", str(i)), 0.05),
]


def _math_step_times(case: Callable[[int], tuple[str, str]], count: int, *,
                     threaded: bool) -> tuple[list[float], float]:
    """Step times (ms) of ``count`` answers of one case, and the mean reward."""
    from concurrent.futures import ThreadPoolExecutor

    from agentgym.envs.math import MathEnv

    env = MathEnv(verify_timeout=1)
    rewards = []

    def one(i: int) -> float:
        answer, reference = case(i)
        env.reset(seed=0, options={"problem": {"question": "q", "answer": reference}})
        start = time.perf_counter_ns()
        rewards.append(float(env.step(answer)[1]))
        return (time.perf_counter_ns() - start) / 1e6

    # One untimed step first: imports, and in a worker thread the checking child process.
    offset = 1000 if threaded else 0  # other numbers than the main-thread run
    if not threaded:
        one(-1)
        return [one(offset + i) for i in range(count)], statistics.mean(rewards[1:])
    with ThreadPoolExecutor(max_workers=1) as pool:  # the rollout manager's way: a worker thread
        pool.submit(one, -1).result()
        times = [pool.submit(one, offset + i).result() for i in range(count)]
    return times, statistics.mean(rewards[1:])


def math_table(count: int) -> None:
    """Math-LLM-v0 and ReasoningGym-LLM-v0 step latency (milliseconds)."""
    from agentgym.envs.math import MathEnv

    print(f"\n# Math-LLM-v0: one step, up to {count} per case (milliseconds)\n")
    print("| env | case | thread | reward | median | p90 |")
    print("|---|---|---|---:|---:|---:|")
    env = MathEnv(levels=(1, 2, 3, 4, 5))
    resets = []
    for seed in range(count):
        start = time.perf_counter_ns()
        env.reset(seed=seed)
        resets.append((time.perf_counter_ns() - start) / 1e6)
    _row("Math-LLM-v0", "reset (generate a problem)", "main", resets, None)
    for label, case, share in MATH_CASES:
        times = max(2, int(count * share))
        for threaded in (False, True):
            samples, reward = _math_step_times(case, times, threaded=threaded)
            _row("Math-LLM-v0", label, "worker" if threaded else "main", samples, reward)
    try:
        from agentgym.envs.reasoning import ReasoningGymEnv
        for task in ("basic_arithmetic", "knights_knaves", "arc_1d", "sudoku"):
            rg_env = ReasoningGymEnv(task=task)
            resets, steps, rewards = [], [], []
            for seed in range(count):
                start = time.perf_counter_ns()
                rg_env.reset(seed=seed)
                resets.append((time.perf_counter_ns() - start) / 1e6)
                start = time.perf_counter_ns()
                rewards.append(float(rg_env.step(f"<answer>{rg_env.entry['answer']}</answer>")[1]))
                steps.append((time.perf_counter_ns() - start) / 1e6)
            _row(f"ReasoningGym-LLM-v0 ({task})", "reset", "main", resets, None)
            _row(f"ReasoningGym-LLM-v0 ({task})", "step, right answer", "main", steps,
                 statistics.mean(rewards))
    except ImportError as exc:  # reasoning-gym is an optional extra
        print(f"| ReasoningGym-LLM-v0 | not installed: {exc} | | | | |")


def _row(env_id: str, label: str, thread: str, samples: list[float], reward: float | None) -> None:
    shown = "" if reward is None else f"{reward:g}"
    print(f"| {env_id} | {label} | {thread} | {shown} | {statistics.median(samples):,.2f} "
          f"| {_p90(samples):,.2f} |")


# -- retrieval: BM25 over a generated corpus, and SearchQA-LLM-v0's steps ---------


def _generated_corpus(passages: int):  # -> agentgym.envs.retrieval.Corpus
    """Exactly ``passages`` passages of a generated world (about 1.6 per person)."""
    from agentgym.envs.retrieval import Corpus, generate_world

    people = max(8, int(passages / 1.58))
    while True:
        world = generate_world(0, people, with_questions=False)
        if len(world.corpus) >= passages:
            return Corpus(list(world.corpus)[:passages])
        people = int(people * 1.1) + 8


def _query_rows(retriever, tool, queries: list[str], label: str, passages: int) -> None:
    for via, run in (("index.search", lambda q: retriever.search(q, 3)),
                     ("SearchTool.call", lambda q: tool.call(query=q))):
        samples = []
        for query in queries:
            start = time.perf_counter_ns()
            run(query)
            samples.append((time.perf_counter_ns() - start) / 1000)
        print(f"| {passages:,} | {label} | {via} | {statistics.median(samples):,.0f} | "
              f"{_p90(samples):,.0f} | {len(samples) / (sum(samples) / 1e6):,.0f} |")


def retrieval_tables(passages: int, queries: int, steps: int) -> None:
    """BM25 build and query speed over ``passages`` generated passages, then SearchQA steps."""
    import random
    import tempfile

    from agentgym.envs.retrieval import BM25Retriever, SearchTool, generate_world

    start = time.perf_counter()
    corpus = _generated_corpus(passages)
    timings = [("generate the corpus (not part of search)", time.perf_counter() - start)]
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        retriever = BM25Retriever(corpus, cache_dir=False)
        timings.append(("build the index (tokenize, stem, bm25s)", time.perf_counter() - start))
        start = time.perf_counter()
        BM25Retriever(corpus, cache_dir=folder)
        timings.append(("build and save to a cache folder", time.perf_counter() - start))
        start = time.perf_counter()
        if not BM25Retriever(corpus, cache_dir=folder).loaded_from_cache:
            raise SystemExit("The saved index was not loaded back: the disk cache is broken.")
        timings.append(("load from the cache folder", time.perf_counter() - start))
    print(f"\n# Retrieval: BM25 (bm25s) index of {passages:,} generated passages (seconds)\n")
    print("| step | seconds |\n|---|---:|")
    for label, seconds in timings:
        print(f"| {label} | {seconds:,.2f} |")

    rng = random.Random(0)
    small = generate_world(0).corpus
    print(f"\n# Retrieval: one query at a time, top 3, {queries} queries (microseconds)\n")
    print("| passages | queries | through | median | p90 | queries/s |")
    print("|---:|---|---|---:|---:|---:|")
    for name, chosen in ((f"{len(small):,} (default world)", small), (f"{passages:,}", corpus)):
        index = retriever if chosen is corpus else BM25Retriever(chosen, cache_dir=False)
        tool = SearchTool(index)
        names = [chosen[rng.randrange(len(chosen))].title for _ in range(queries)]
        _query_rows(index, tool, names, "a title (key phrase)", len(chosen))
        _query_rows(index, tool, [f"In which city was {n} born?" for n in names],
                    "a whole question", len(chosen))
    searchqa_table(steps)


def searchqa_table(steps: int) -> None:
    """SearchQA-LLM-v0 through gym.make: reset, a search turn, an answer turn."""
    env = gym.make("SearchQA-LLM-v0")
    samples: dict[str, list[float]] = {"reset": [], "search turn": [], "answer turn": []}
    for seed in range(steps):
        start = time.perf_counter_ns()
        env.reset(seed=seed)
        samples["reset"].append((time.perf_counter_ns() - start) / 1000)
        item = env.unwrapped.item
        start = time.perf_counter_ns()
        env.step(f"<search>{item.hops[0].query}</search>")
        samples["search turn"].append((time.perf_counter_ns() - start) / 1000)
        start = time.perf_counter_ns()
        env.step(f"<answer>{item.answers[0]}</answer>")
        samples["answer turn"].append((time.perf_counter_ns() - start) / 1000)
    print(f"\n# SearchQA-LLM-v0 (gym.make, default world), {steps} episodes (microseconds)\n")
    print("| call | median | p90 |\n|---|---:|---:|")
    for label, values in samples.items():
        print(f"| {label} | {statistics.median(values):,.1f} | {_p90(values):,.1f} |")


# -- web: WebShop-LLM-v0's steps over HTTP (and Chromium when it is installed) ----------


def _webshop_episode(env, seed: int, samples: dict[str, list[float]]) -> None:
    """One scripted episode; each call's time (ms) goes under its label."""

    def timed(label: str, call, *args) -> object:
        start = time.perf_counter_ns()
        result = call(*args)
        samples.setdefault(label, []).append((time.perf_counter_ns() - start) / 1e6)
        return result

    timed("reset (new catalogue, GET home)", lambda: env.reset(seed=seed))
    goal = env.goal
    timed("invalid action (feedback)", env.step, "I am not sure what to do here.")
    timed("search (GET results, parse)", env.step, f"<answer>search[{goal.query}]</answer>")
    first = next(n for n, link in env.browser.page.links.items() if "/product/" in link.url)
    timed("click (GET product page, parse)", env.step, f"<answer>click[{first}]</answer>")
    timed("back (no fetch)", env.step, "back")
    env.browser.open(f"/product/{goal.target}")  # untimed: the product the goal was drawn from
    for name, value in goal.options:
        timed("select (no fetch)", env.step, f"select[{name}={value}]")
    _, reward, *_ = timed("buy (POST, 303, GET order)", env.step, "buy")
    if reward != 1.0:
        raise SystemExit(f"WebShop seed {seed}: the scripted purchase scored {reward}, not 1.")


def webshop_table(episodes: int) -> None:
    """WebShop-LLM-v0 step latency per kind of action, for each browser backend here."""
    from agentgym.envs.web import WebShopEnv
    from agentgym.envs.web.chromium import find_chromium

    backends = [("http", episodes)]
    try:
        import playwright  # noqa: F401

        if find_chromium() is not None:
            backends.append(("chromium", max(3, episodes // 10)))
    except ImportError:
        pass
    print("\n# WebShop-LLM-v0: one call, scripted episodes (milliseconds)\n")
    print("| backend | episodes | call | median | p90 |\n|---|---:|---|---:|---:|")
    for backend, count in backends:
        env = WebShopEnv(backend=backend)
        _webshop_episode(env, 10_000, {})  # untimed: starts the server (and Chromium)
        samples: dict[str, list[float]] = {}
        for seed in range(count):
            _webshop_episode(env, seed, samples)
        env.close()
        for label, values in samples.items():
            print(f"| {backend} | {count} | {label} | {statistics.median(values):,.2f} "
                  f"| {_p90(values):,.2f} |")



HUGE = 10_000_000


def _huge_actions(game: TextEnv, length: int) -> dict[str, str]:
    """Actions of ``length`` characters (about), by kind, written for ``game``."""
    fmt = game.format_action
    return {
        "one letter": "x" * length,
        "letters in the format": fmt("a" * length),
        "numbers in the format": fmt("1 " * (length // 2)),
        "opening tags": "<answer>" * (length // 8),
        "python tool call": "<python>" + "#" * length + "</python>",
    }


def _step_ms(env: gym.Env, action: str, repeats: int) -> float:
    """Median time (ms) of stepping ``action`` after an untimed reset, ``repeats`` times."""
    samples = []
    for _ in range(repeats):
        env.reset(seed=0)
        start = time.perf_counter_ns()
        env.step(action)
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def huge_action_table(repeats: int) -> None:
    """Every registered env stepped with a 10 MB action: capped, short, and uncapped."""
    print(f"\n# One step of a 10 MB action, the slowest of 5 kinds (median of {repeats}; "
          "cap off: one step)\n")
    print("| env | slowest kind | ms, capped | ms, 100 characters | length adds < 50 ms "
          "| s, cap off |")
    print("|---|---|---:|---:|---|---:|")
    for env_id in [info.id for info in agentgym.list_envs() if info.family != "test"]:
        env = gym.make(env_id, disable_env_checker=True)
        game = env.unwrapped
        try:
            env.reset(seed=0)
            env.step("warm up")  # imports, and the sandbox or server an env starts on first use
            capped = {kind: _step_ms(env, action, repeats)
                      for kind, action in _huge_actions(game, HUGE).items()}
        except SandboxUnavailable as exc:
            print(f"| {env_id} | unavailable: {str(exc).splitlines()[0][:80]} | | | | |")
            continue
        kind = max(capped, key=capped.__getitem__)
        short = _step_ms(env, _huge_actions(game, 100)[kind], repeats)
        cap = game.max_action_chars
        game.max_action_chars = HUGE * 2
        uncapped = max(_step_ms(env, action, 1) for action in _huge_actions(game, HUGE).values())
        game.max_action_chars = cap
        env.close()
        verdict = "yes" if capped[kind] - short < 50 else "NO"
        print(f"| {env_id} | {kind} | {capped[kind]:,.1f} | {short:,.1f} | {verdict} "
              f"| {uncapped / 1000:,.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=300)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--code-steps", type=int, default=20)
    parser.add_argument("--math-steps", type=int, default=50)
    parser.add_argument("--code-backends", default="local",
                        help="comma-separated sandbox backends for the code table (local, docker)")
    parser.add_argument("--retrieval-passages", type=int, default=100_000,
                        help="passages in the BM25 benchmark corpus (0 skips the retrieval tables)")
    parser.add_argument("--retrieval-queries", type=int, default=2000)
    parser.add_argument("--searchqa-steps", type=int, default=300)
    parser.add_argument("--web-episodes", type=int, default=200,
                        help="scripted WebShop episodes (Chromium runs a tenth); 0 skips")
    parser.add_argument("--huge-repeats", type=int, default=3,
                        help="steps per kind of 10 MB action in the huge-action table; 0 skips")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"# bench_envs: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"one core, {args.resets} resets and {args.steps} steps per env (median, microseconds)\n")
    print("| env | kwargs | reset raw | step raw | reset gym.make | step gym.make |")
    print("|---|---|---:|---:|---:|---:|")
    for env_id, kwargs in CASES:
        wrapped = gym.make(env_id, **kwargs)
        raw = gym.make(env_id, **kwargs).unwrapped
        cells = [
            statistics.median(time_resets(raw, args.resets)),
            statistics.median(time_steps(raw, args.steps)),
            statistics.median(time_resets(wrapped, args.resets)),
            statistics.median(time_steps(wrapped, args.steps)),
        ]
        label = ", ".join(f"{key}={value}" for key, value in kwargs.items()) or "defaults"
        print(f"| {env_id} | {label} | " + " | ".join(f"{cell:,.1f}" for cell in cells) + " |")
    if args.math_steps > 0:
        math_table(args.math_steps)
    if args.code_steps > 0:
        code_table([name.strip() for name in args.code_backends.split(",") if name.strip()],
                   args.code_steps)
    if args.retrieval_passages > 0:
        retrieval_tables(args.retrieval_passages, args.retrieval_queries, args.searchqa_steps)
    if args.web_episodes > 0:
        webshop_table(args.web_episodes)
    if args.huge_repeats > 0:
        huge_action_table(args.huge_repeats)


if __name__ == "__main__":
    main()

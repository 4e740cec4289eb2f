r"""``Math-LLM-v0``: solve a maths problem; the answer is checked by math-verify.

The agent writes its final answer in ``\boxed{...}`` or ``<answer>...</answer>``.
It is right when math-verify finds it equal to the reference: ``0.5``,
``1/2`` and ``\frac{1}{2}`` are one answer; ``50\%`` is ``0.5``; ``1,000`` is
``1000``; ``x = 3`` is ``3``; words and units around a number are ignored.
Problems come from the built-in generator (:mod:`agentgym.envs.math.problems`)
or from a dataset (:func:`agentgym.envs.math.loading.load_math_dataset`)::

    env = gym.make("Math-LLM-v0", kinds=["fractions"], levels=[2, 3])
    env = gym.make("Math-LLM-v0", problems=load_math_dataset("gsm8k_test.jsonl"))
    env = gym.make("Math-LLM-v0", max_turns=3)            # retries, told only "wrong"
    env = gym.make("Math-LLM-v0", judge=JudgeReward(url, "judge-model", rubric))
    env = gym.make("Math-LLM-v0", answer_format="last_number")  # a bare final number counts too

``answer_format="last_number"`` reads a reply with no box and no tag by its last number, as
evaluations of small models do ("flexible extract"): a 135 M instruct model writes ``16 - 5 = 11``
and never the tags, so the strict format would measure only the format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import re

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.parsing import extract_answer, extract_boxed
from agentgym.rewards.judge import JudgeReward

from agentgym.envs.math.problems import KINDS, LEVELS, MathProblem, generate_problem
from agentgym.envs.math.verify import DEFAULT_TIMEOUT, check_answer, require_math_verify

__all__ = ["ANSWER_FORMATS", "MathEnv", "last_number", "read_answer"]

#: Longest answer shown back in feedback.
_SHOWN_CHARS = 80
#: A number as written in a reply: an integer, a decimal, or a fraction a/b.
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
ANSWER_FORMATS = ("tagged", "last_number")


def read_answer(text: str) -> str | None:
    r"""The final answer in ``text``: the last ``<answer>`` tag, else the last ``\boxed{}``."""
    answer = extract_answer(text)
    return answer if answer is not None else extract_boxed(text)


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (``12``, ``-3.5``, ``3/4``), or None."""
    found = _NUMBER.findall(text)
    return found[-1] if found else None


class MathEnv(TextEnv):
    r"""A maths problem; reward 1 when the answer equals the reference by math-verify.

    Args:
        problems: the problems to draw from (:class:`MathProblem`\ s or dicts
            with ``question`` and ``answer``, e.g. from ``load_math_dataset``);
            ``None`` generates a new problem each episode.
        kinds: kinds of generated problems (a subset of ``arithmetic``,
            ``fractions``, ``linear``, ``word``), drawn uniformly.
        levels: difficulty levels (1 to 5) of generated problems, drawn uniformly.
        max_turns: attempts. After a wrong answer the agent is told it is
            wrong (never what is right) and may try again.
        judge: score answers with an LLM judge instead: a
            :class:`~agentgym.rewards.judge.JudgeReward` or the keyword
            arguments to build one. The reward is then the judge's score in
            [0, 1] (math-verify's verdict stays in ``info["correct"]``), and the
            task counts as solved from a score of ``judge_pass`` up.
        judge_pass: the judge score that counts as solved.
        verify_timeout: seconds math-verify may spend on one answer.
        answer_format: ``tagged`` (the answer must be in a box or answer tags) or ``last_number``
            (a reply with neither is read by its last number).
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.

    ``reset(options={"problem": {"question": ..., "answer": ...}})`` poses a
    given problem; ``reset(options={"index": i})`` poses ``problems[i]``.
    """

    action_format = r"\boxed{42} or <answer>42</answer>"

    def __init__(
        self,
        *,
        problems: Sequence[MathProblem | Mapping[str, Any]] | None = None,
        kinds: Sequence[str] | str = KINDS,
        levels: Sequence[int] | int = (1, 2, 3),
        max_turns: int = 1,
        judge: JudgeReward | Mapping[str, Any] | None = None,
        judge_pass: float = 0.5,
        verify_timeout: int = DEFAULT_TIMEOUT,
        format_penalty: float = 0.1,
        answer_format: str = "tagged",
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, format_penalty=format_penalty,
                         render_mode=render_mode)
        require_math_verify()
        if answer_format not in ANSWER_FORMATS:
            raise ConfigError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}.")
        self.answer_format = answer_format
        self.kinds = _read_kinds(kinds)
        self.levels = _read_levels(levels)
        self.problems = None if problems is None else [_read_problem(p, "problems item")
                                                       for p in problems]
        if self.problems is not None and not self.problems:
            raise ConfigError("problems is empty: pass at least one problem, or None to generate.")
        check_number("verify_timeout", verify_timeout, minimum=1, maximum=600)
        check_number("judge_pass", judge_pass, minimum=0, maximum=1, integer=False)
        self.verify_timeout = verify_timeout
        self.judge = JudgeReward(**judge) if isinstance(judge, Mapping) else judge
        self._owns_judge = isinstance(judge, Mapping)  # built here, so closed here
        self.judge_pass = float(judge_pass)
        self.problem = MathProblem("", "")
        self._tries: list[str] = []

    # -- episode ---------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        self.problem = self._choose(options or {})
        self._tries = []
        return (f"{self.problem.question}\n\nPut your final answer in \\boxed{{}} or "
                "<answer></answer>.")

    def _choose(self, options: dict[str, Any]) -> MathProblem:
        if "problem" in options:
            return _read_problem(options["problem"], 'options["problem"]')
        if "index" in options:
            if self.problems is None:
                raise ConfigError('options["index"] needs problems=...; this env generates them.')
            check_number('options["index"]', options["index"], minimum=0,
                         maximum=len(self.problems) - 1)
            return self.problems[options["index"]]
        if self.problems is not None:
            return self.problems[int(self.np_random.integers(len(self.problems)))]
        kind = self.kinds[int(self.np_random.integers(len(self.kinds)))]
        level = self.levels[int(self.np_random.integers(len(self.levels)))]
        return generate_problem(self.np_random, kind, level)

    # -- a turn ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        answer = read_answer(action)
        if answer is None and self.answer_format == "last_number":
            answer = last_number(action)
        if not answer:
            why = "Your answer is empty." if answer is not None else "No final answer found."
            return Outcome(f"{why} Write it in \\boxed{{}} or <answer></answer>, e.g. "
                           f"{self.action_format}.", action_valid=False)
        shown = _shorten(answer)
        verdict = check_answer(answer, self.problem.answer, self.verify_timeout)
        if not verdict.reference_readable:
            # A bad data row is not the agent's fault: end the episode unscored.
            return Outcome("This problem's reference answer could not be read; the episode is "
                           "not scored.", terminated=True,
                           info={"correct": False, "reference_readable": False})
        if not verdict.readable:
            return Outcome(f"No number or expression could be read in {shown!r}. Write only the "
                           "final answer, e.g. \\boxed{3/4}.", action_valid=False)
        info: dict[str, Any] = {"correct": verdict.equal, "answer": answer}
        reward, solved = float(verdict.equal), verdict.equal
        if self.judge is not None:
            judged = self.judge.score(self.problem.question, answer, self.problem.answer)
            reward, solved = judged.score, judged.score >= self.judge_pass
            info.update(judge_score=judged.score, judge_parsed=judged.parsed)
        if solved:
            return Outcome(f"Correct: {shown}.", reward, terminated=True, success=True, info=info)
        self._tries.append(shown)
        more = " Try again." if self.turn < self.max_turns else ""
        return Outcome(f"{shown} is not correct.{more}", reward, info=info)

    # -- text ------------------------------------------------------------------

    def render_text(self) -> str:
        lines = [f"Problem: {self.problem.question}"]
        lines += [f"Wrong answer: {shown}" for shown in self._tries]
        return "\n".join(lines)

    def _describe(self) -> str:
        retry = ("After a wrong answer you are told it is wrong (not what is right) and may try "
                 "again." if self.max_turns > 1 else "You answer once.")
        lenient = " (with neither, your last number)" if self.answer_format == "last_number" else ""
        scoring = ("An LLM judge scores your answer from 0 to 1." if self.judge is not None else
                   "Rewards: 1 for a correct answer (the episode ends), 0 for a wrong one.")
        return (
            "Maths. Solve the problem and give one final answer: a number, a fraction or an "
            "expression, inside \\boxed{} or inside answer tags, e.g. \\boxed{\\frac{3}{4}} or "
            "<answer>3/4</answer>. You may work it out first; only the last box or answer tag "
            f"counts{lenient}. Answers are compared by value: 0.5, 1/2 and \\frac{{1}}{{2}} are the same, "
            f"and units or words around the number are ignored. {retry}\n{scoring}"
        )

    def format_action(self, move: str) -> str:
        return f"\\boxed{{{move}}}"

    def random_action(self, rng: np.random.Generator) -> str:
        # Right a third of the time, so random play also sees successes.
        if rng.random() < 1 / 3 and self.problem.answer:
            move = self.problem.answer
        else:
            move = str(int(rng.integers(-20, 100)))
        return self.format_action(move) if rng.random() < 0.5 else f"<answer>{move}</answer>"

    def _reset_info(self) -> dict[str, Any]:
        return {"kind": self.problem.kind, "level": self.problem.level}

    def close(self) -> None:
        """Close the judge if this env built it from a dict (a given one belongs to its owner)."""
        if self._owns_judge and self.judge is not None:
            self.judge.close()
        super().close()


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _read_problem(problem: Any, name: str) -> MathProblem:
    if isinstance(problem, MathProblem):
        return problem
    if isinstance(problem, Mapping):
        question, answer = problem.get("question"), problem.get("answer")
        if isinstance(question, str) and isinstance(answer, str) and question and answer:
            return MathProblem(question, answer, str(problem.get("kind", "custom")),
                               int(problem.get("level", 0)))
    raise ConfigError(
        f"{name} must be a MathProblem or a dict with 'question' and 'answer' strings, "
        f"got {problem!r:.200}."
    )


def _read_kinds(kinds: Sequence[str] | str) -> tuple[str, ...]:
    chosen = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    unknown = [kind for kind in chosen if kind not in KINDS]
    if not chosen or unknown:
        raise ConfigError(f"kinds must be some of {KINDS}, got {kinds!r}.")
    return chosen


def _read_levels(levels: Sequence[int] | int) -> tuple[int, ...]:
    chosen = (levels,) if isinstance(levels, int) else tuple(levels)
    if not chosen or any(isinstance(lv, bool) or lv not in LEVELS for lv in chosen):
        raise ConfigError(f"levels must be some of {LEVELS}, got {levels!r}.")
    return chosen

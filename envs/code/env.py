"""Code: solve a programming problem; visible tests give feedback, hidden tests the reward.

Each episode is one problem (drawn with ``self.np_random``, or chosen with
``reset(options={"problem_id": "two_sum"})``). The first observation gives the
statement, the function signature (or says to write a stdin/stdout program)
and the visible examples. The agent answers with code::

    ```python
    def two_sum(nums, target):
        ...
    ```

The last fenced Python block of the reply is graded, or the content of
``<answer>...</answer>`` if that comes later (see
:func:`~agentgym.envs.code.extract.extract_code`). Each answer runs once in the
sandbox against every test, visible and hidden; the next observation shows
each visible test (passed, or expected vs got, or the trimmed traceback) and
how many hidden tests passed. The agent may revise up to ``max_turns`` times.

Reward: the fraction of hidden tests that the latest code passes, given once,
on the episode's last turn (when every hidden test passes, which ends the
episode as a success, or at the turn limit); earlier turns get 0, so an
episode's return is the final code's score. ``info["score"]`` carries every
submission's fraction for those who want per-turn signals. An answer with no
code is not run: it gets a format reminder, ``action_valid=False`` and the
format penalty (on the last turn, on top of the latest code's score).
Problems with no hidden tests are scored on their visible ones.

The sandbox: pass one (``sandbox=``; you close it), or let the env open one on
the first answer with ``open_sandbox(backend)`` (``"auto"``: Docker when its
engine and image are there, else the local one). Envs of one process share
that sandbox, one per backend (a vector of envs holds one Docker pool, not one
each); the last env to :meth:`close` closes it, or interpreter exit does.
``info["sandbox"]`` names the backend that ran the code. ``sandbox_url=``
(or ``AGENTGYM_SANDBOX_URL`` when the backend is ``"auto"``) runs the code on
sandbox services instead (``agentgym sandbox serve``; several URLs,
comma-separated, share the load)::

    gym.make("Code-LLM-v0", sandbox_url="http://127.0.0.1:8100")
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.envs.code.extract import extract_code
from agentgym.envs.code.feedback import feedback_text, task_text
from agentgym.envs.code.loaders import load_problems
from agentgym.envs.code.problems import Problem, builtin_problems
from agentgym.envs.code.runner import Evaluation, evaluate
from agentgym.errors import ConfigError
from agentgym.sandbox import Sandbox, pick_backend
from agentgym.sandbox.shared import borrow_sandbox, give_back

__all__ = ["MAX_CODE_CHARS", "CodeEnv"]

#: Longest code run; a longer answer is refused as invalid.
MAX_CODE_CHARS = 100_000
_log = logging.getLogger(__name__)
_ANSWER_HINT = "in one ```python block (or inside <answer></answer> tags)"


class CodeEnv(TextEnv):
    """Write code that passes a problem's hidden tests, with feedback from its visible ones.

    Args:
        problems: the problems to draw from: :class:`Problem` objects, or rows
            (a list of dicts, a ``datasets`` split) in any format
            :func:`~agentgym.envs.code.loaders.load_problems` reads.
            Default: the 42 built-in problems.
        dataset: instead of ``problems``, a ``.jsonl``/``.json``/``.parquet`` file
            of problems (any format ``load_problems`` reads).
        num_visible: visible examples per problem read from MBPP, APPS or
            prompt/tests rows (the rest are hidden); native rows say it themselves.
        sandbox: a sandbox to run code in (the env does not close it).
        backend: when no ``sandbox`` is given, the backend of the shared sandbox
            the env borrows (``"auto"``, ``"docker"``, ``"local"``, or service URLs).
        sandbox_url: run code on sandbox services (``agentgym sandbox serve``):
            ``"http://host:8100"``, several comma-separated; the env borrows the
            process's shared client for them. Default: ``AGENTGYM_SANDBOX_URL``
            when ``backend`` is ``"auto"``.
        test_timeout: seconds each test may run.
        time_budget: seconds all the tests of one answer may run together.
        show_hidden: say how many hidden tests passed after each answer.
        max_turns: answers per episode (the first plus revisions).
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    action_format = "```python\n<your code>\n```"
    # Room for the longest program the env runs and as much text around it, so
    # that a program too long to run is told so rather than cut.
    max_action_chars = 2 * MAX_CODE_CHARS

    def __init__(
        self,
        *,
        problems: Iterable[Problem | dict[str, Any]] | None = None,
        dataset: str | os.PathLike[str] | None = None,
        num_visible: int = 1,
        sandbox: Sandbox | None = None,
        backend: str = "auto",
        sandbox_url: str | list[str] | None = None,
        test_timeout: float = 2.0,
        time_budget: float = 10.0,
        show_hidden: bool = True,
        max_turns: int = 3,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        check_number("test_timeout", test_timeout, minimum=0.01, maximum=600, integer=False)
        check_number("time_budget", time_budget, minimum=test_timeout, maximum=3600, integer=False)
        if problems is not None and dataset is not None:
            raise ConfigError("Give problems or dataset, not both.")
        if dataset is not None:
            loaded = load_problems(dataset, num_visible=num_visible)
        elif problems is not None:
            loaded = load_problems(problems, num_visible=num_visible)
        else:
            loaded = list(builtin_problems())
        if not loaded:
            raise ConfigError("No problems to play: problems or dataset is empty.")
        if sandbox is not None and not isinstance(sandbox, Sandbox):
            raise ConfigError(f"sandbox must be an agentgym Sandbox, got {type(sandbox).__name__}.")
        if sandbox is not None and sandbox_url is not None:
            raise ConfigError("Give sandbox or sandbox_url, not both.")
        backend = pick_backend(backend, sandbox_url)
        self.problems: tuple[Problem, ...] = tuple(loaded)
        self._by_id = {problem.id: problem for problem in self.problems}
        self.backend = backend
        self.test_timeout = float(test_timeout)
        self.time_budget = float(time_budget)
        self.show_hidden = bool(show_hidden)
        self._sandbox = sandbox
        self._borrowed = False
        self.problem: Problem = self.problems[0]
        #: The verdict on the latest code of this episode (None before the first).
        self.last: Evaluation | None = None
        self._feedback = ""

    # -- the sandbox -----------------------------------------------------------

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox code runs in: the one given, or the process's shared one for ``backend``
        (opened on first use; see :mod:`agentgym.sandbox.shared`)."""
        if self._sandbox is None:
            self._sandbox = borrow_sandbox(self.backend)
            self._borrowed = True
            _log.info("Code-LLM-v0 runs code in the %r sandbox.", self._sandbox.name)
        return self._sandbox

    def close(self) -> None:
        """Give back the shared sandbox (the last env to do so closes it); a given one stays."""
        if self._borrowed:
            self._sandbox, self._borrowed = None, False
            give_back(self.backend)
        super().close()

    # -- episode ---------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        options = dict(options or {})
        problem_id = options.pop("problem_id", None)
        if options:
            raise ConfigError(f"Unknown reset options {sorted(options)}; Code takes 'problem_id'.")
        if problem_id is None:
            self.problem = self.problems[int(self.np_random.integers(len(self.problems)))]
        else:
            self.problem = self._find(problem_id)
        self.last = None
        self._feedback = ""
        return task_text(self.problem, _ANSWER_HINT)

    def _find(self, problem_id: Any) -> Problem:
        problem = self._by_id.get(str(problem_id))
        if problem is None:
            close = difflib.get_close_matches(str(problem_id), list(self._by_id), n=3)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ConfigError(f"No problem with id {problem_id!r}.{hint} "
                              f"See env.problems for the {len(self.problems)} ids.")
        return problem

    def _play(self, action: str) -> Outcome:
        final = self.turn >= self.max_turns
        code = extract_code(action)
        if code is None or len(code) > MAX_CODE_CHARS:
            why = ("No code found." if code is None
                   else f"The code is longer than {MAX_CODE_CHARS} characters.")
            return Outcome(
                f"{why} Answer with your complete code {_ANSWER_HINT}, e.g.\n"
                f"{self.action_format}",
                reward=self._score() if final else 0.0,
                action_valid=False,
                info=self._info(),
            )
        self.last = evaluate(self.sandbox, self.problem, code, test_timeout=self.test_timeout,
                             time_budget=self.time_budget)
        success = self.last.passed == len(self.last.scored)
        self._feedback = feedback_text(self.problem, self.last, show_hidden=self.show_hidden)
        if success:
            which = "hidden test" if self.problem.hidden else "test"
            ending = f"\nEvery {which} passed: the problem is solved."
        elif not final:
            left = self.max_turns - self.turn
            ending = f"\nRevise your code and answer again ({left} turn(s) left)."
        else:
            ending = ""
        return Outcome(
            self._feedback + ending,
            reward=self._score() if success or final else 0.0,
            terminated=success,
            success=success,
            info=self._info(),
        )

    def _score(self) -> float:
        return self.last.score if self.last is not None else 0.0

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"problem_id": self.problem.id, "score": self._score()}
        if self.last is not None:
            info.update(
                passed=self.last.passed, total=len(self.last.scored),
                visible_passed=sum(outcome.passed for outcome in self.last.visible),
                visible_total=len(self.last.visible),
                sandbox=self.sandbox.name,
            )
        return info

    # -- text ------------------------------------------------------------------

    def render_text(self) -> str:
        text = f"Problem {self.problem.id}, turn {self.turn} of {self.max_turns}."
        return f"{text}\n{self._feedback}" if self._feedback else text

    def _describe(self) -> str:
        return (
            "Code. You get a programming problem: a statement, the function to write (or a "
            "program that reads standard input and prints to standard output) and a few "
            "examples. Answer with your complete Python solution in one fenced block:\n"
            f"{self.action_format}\n"
            "or inside <answer></answer> tags; if your reply holds several code blocks, the "
            "last one is graded. Your code runs on the visible examples, whose results you "
            "see (expected vs got, or the error), and on hidden tests, of which you see how "
            "many passed; you may then revise it.\n"
            "Reward: the fraction of hidden tests your final code passes, given when the "
            "episode ends: when every test passes (solved) or at the turn limit."
        )

    def _reset_info(self) -> dict[str, Any]:
        return {"problem_id": self.problem.id}

    def format_action(self, move: str) -> str:
        return f"```python\n{move}\n```"

    def random_action(self, rng: np.random.Generator) -> str:
        """Code that runs but is almost never right: a constant answer."""
        if self.problem.mode == "stdio":
            return self.format_action(f"print({int(rng.integers(-2, 10))})")
        value = ("None", "0", "1", "''", "[]", "True", "-1")[int(rng.integers(7))]
        return self.format_action(f"def {self.problem.entry_point}(*args):\n    return {value}")


r"""Is an answer equal to a reference? Decided by ``math-verify``, with a time limit.

:func:`check_answer` parses both with math-verify (LaTeX or plain text:
``\frac{1}{2}``, ``0.5``, ``50\%``, ``1,000``, ``x = 3``, sets, intervals,
expressions) and compares them symbolically and numerically, as math-verify
does::

    >>> check_answer(r"\dfrac{1}{2}", "0.5").equal
    True

math-verify bounds its work with ``signal.alarm``, which only the main thread
may use, and a model can write an answer that sympy would evaluate for ever
(``9^{9^{9^9}}``). So in the main thread the check runs here with
math-verify's own time limit, and in any other thread (the rollout manager
steps envs in a thread pool) it runs in one shared child process
(:mod:`agentgym.envs.math.verify_worker`) that is killed and restarted when an
answer takes too long. Either way a check never hangs and never raises on
the text it is given.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, cast

from agentgym.errors import MissingDependencyError

__all__ = [
    "DEFAULT_TIMEOUT",
    "INSTALL_HINT",
    "MAX_ANSWER_CHARS",
    "Verdict",
    "check_answer",
    "check_answer_here",
    "require_math_verify",
    "shutdown_worker",
]

#: Seconds math-verify may spend parsing, then comparing (whole seconds: ``signal.alarm``).
DEFAULT_TIMEOUT = 2
#: Longest answer parsed; longer text is unreadable (bounds the LaTeX parser's work).
MAX_ANSWER_CHARS = 2_000
INSTALL_HINT = MissingDependencyError.install_hint("math", "math-verify")
# The child imports sympy and math-verify before it answers its first request.
_WORKER_START_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the verifier made of one answer.

    ``readable`` is False when math-verify found no mathematical answer in the
    text (empty, too long, or not maths at all); ``reference_readable`` is
    False when it found none in the reference (a bad data row, never the
    agent's fault). ``timed_out`` says the check ran out of time (``equal``
    is then False).
    """

    equal: bool
    readable: bool = True
    reference_readable: bool = True
    timed_out: bool = False


def require_math_verify() -> None:
    """Raise :class:`MissingDependencyError` with the fix when math-verify is missing.

    Looks the package up without importing it: the import loads sympy (0.3 to
    0.8 s and 45 MB here), which making an env need not wait for, and which a
    process whose checks all go to the child process (see :func:`check_answer`)
    never needs.
    """
    if importlib.util.find_spec("math_verify") is None:
        raise MissingDependencyError(
            f"The math envs check answers with math-verify, which is not installed: "
            f"{INSTALL_HINT}."
        )


class _DropTimeoutWarnings(logging.Filter):
    """Drops math-verify's "Timeout during parsing/comparison" warnings.

    A timeout is an ordinary verdict here (a wrong answer), not news: logged,
    it would print each runaway answer, model text, to stderr through the
    rollout's progress bar. Its other warnings still get through.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout during")


_TIMEOUT_FILTER = _DropTimeoutWarnings()


def _quiet_timeouts() -> None:
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if _TIMEOUT_FILTER not in logger.filters:
            logger.addFilter(_TIMEOUT_FILTER)


def _parse(text: str, timeout: int) -> list[object]:
    from math_verify import parse

    # "$...$" reads both LaTeX and plain answers, and picks the number out of
    # "42 apples." or "The answer is 42"; raw text is the fallback for what
    # is not maths-mode friendly.
    parsed = parse(f"${text}$", parsing_timeout=timeout)
    return parsed or parse(text, parsing_timeout=timeout)


def check_answer_here(answer: str, reference: str, timeout: int = DEFAULT_TIMEOUT) -> Verdict:
    """:func:`check_answer` in this thread; only the main thread may call it.

    math-verify sets ``signal.alarm`` for its time limit, so from another
    thread this raises ``ValueError``; use :func:`check_answer` there.
    """
    from math_verify import verify

    _quiet_timeouts()
    gold = _parse(reference, timeout) if len(reference) <= MAX_ANSWER_CHARS else []
    if not gold:
        return Verdict(False, readable=True, reference_readable=False)
    if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return Verdict(False, readable=False)
    predicted = _parse(answer, timeout)
    if not predicted:
        return Verdict(False, readable=False)
    return Verdict(bool(verify(gold, predicted, timeout_seconds=timeout)))


def check_answer(answer: str, reference: str, timeout: int = DEFAULT_TIMEOUT) -> Verdict:
    """Whether ``answer`` equals ``reference`` by math-verify, from any thread.

    ``reference`` is the gold answer (math-verify's comparison is not quite
    symmetric: the gold side decides, e.g., whether ``x = 3`` may match ``3``).
    Never raises on the text; raises :class:`MissingDependencyError` when
    math-verify is not installed.
    """
    if threading.current_thread() is threading.main_thread():
        require_math_verify()
        return check_answer_here(answer, reference, timeout)
    return _WORKER.check(answer, reference, timeout)  # checks for math-verify when it starts


class _Worker:
    """One child process that checks answers for threads that cannot use signals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def check(self, answer: str, reference: str, timeout: int) -> Verdict:
        request = json.dumps({"answer": answer, "reference": reference, "timeout": timeout})
        with self._lock:
            # A child that died since the last answer is replaced, once.
            for _ in range(2):
                process = self._ensure_started()
                try:
                    stdin = cast(IO[bytes], process.stdin)  # a pipe: Popen(stdin=PIPE)
                    stdin.write(request.encode() + b"\n")
                    stdin.flush()
                    break
                except OSError:
                    self._stop()
            else:
                return Verdict(False, timed_out=True)
            # Two parses and a comparison each have ``timeout``; the margin is for the pipe.
            line = self._read_line(process, 3 * timeout + 3.0)
            if line is None:
                self._stop()  # stuck past its own alarm: a fresh child takes the next answer
                return Verdict(False, timed_out=True)
        return Verdict(**json.loads(line))

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()  # a dead child's pipes are closed before a new one starts
        require_math_verify()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "agentgym.envs.math.verify_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        ready = self._read_line(self._process, _WORKER_START_TIMEOUT)
        if ready is None or json.loads(ready) != {"ready": True}:
            self._stop()
            raise MissingDependencyError(
                f"The answer-checking child process did not start; is math-verify "
                f"installed for {sys.executable}? {INSTALL_HINT}."
            )
        return self._process

    @staticmethod
    def _read_line(process: subprocess.Popen[bytes], timeout: float) -> bytes | None:
        stdout = cast(IO[bytes], process.stdout)  # a pipe: Popen(stdout=PIPE)
        readable, _, _ = select.select([stdout], [], [], timeout)
        if not readable:
            return None
        line = stdout.readline()
        return line or None

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def stop(self) -> None:
        with self._lock:
            self._stop()


_WORKER = _Worker()
atexit.register(_WORKER.stop)


def shutdown_worker() -> None:
    """Stop the checking child process, if one runs (a later check starts a new one)."""
    _WORKER.stop()

"""Read coding problems from the common public formats.

:func:`load_problems` takes a file (``.jsonl``, ``.json`` or ``.parquet``), a
``datasets.Dataset`` split, or any iterable of rows (dicts), and reads each
row in one of four formats, told apart by its columns:

- **native** (``statement`` with ``visible``/``hidden``): see
  :mod:`agentgym.envs.code.problems`; read as written.
- **MBPP** (``text`` or ``prompt``, ``test_list`` of assert strings, ``code``,
  optional ``test_setup_code``, ``challenge_test_list``): the function name comes
  from the first assert (or the reference ``code``), its ``def`` line from ``code``.
- **APPS** (``question``, ``input_output``: JSON with ``inputs``/``outputs``
  and, for call-based problems, ``fn_name``; optional ``starter_code``):
  stdin/stdout problems, or calls of ``fn_name`` (a ``class Solution`` method works too).
- **prompt/tests** (a ``datasets`` split with ``prompt`` and ``tests``
  columns): ``prompt`` is the statement (text, or chat messages whose last
  user turn is taken); ``tests`` is a list of assert strings, Python source
  made of asserts, an APPS-style ``{"inputs", "outputs"}`` object (or its
  JSON text), or a list of ``{"input", "output"}`` objects (stdin/stdout).
  Optional columns: ``entry_point``, ``signature``/``starter_code``, ``setup``, ``id``.

The first ``num_visible`` tests of a row become its visible examples, the rest
its hidden tests (native rows say which are which themselves). An assert of
the form ``assert <expression> == <literal>`` becomes an ``expr`` test whose
expected value never enters the sandbox; any other assert runs as it is.
"""

from __future__ import annotations

import ast
import builtins
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentgym.core import check_number
from agentgym.envs.code.problems import Problem, TestCase
from agentgym.errors import ConfigError, MissingDependencyError

__all__ = ["FORMATS", "load_problems"]

FORMATS = ("auto", "native", "mbpp", "apps", "prompt_tests")
_log = logging.getLogger(__name__)
# Modules MBPP-style asserts use without importing them; imported before the tests.
_TEST_MODULES = ("math", "re", "collections", "itertools", "heapq", "string")


def load_problems(
    source: str | os.PathLike[str] | Iterable[Any],
    *,
    format: str = "auto",
    num_visible: int = 1,
    skip_invalid: bool = False,
) -> list[Problem]:
    """Problems from a file, a ``datasets`` split or rows; see the module docstring.

    Args:
        source: a ``.jsonl`` / ``.json`` / ``.parquet`` path, a ``datasets.Dataset``,
            or an iterable of dict rows (or :class:`Problem` objects, kept as they are).
        format: ``"auto"`` (per row, from its columns) or one of ``native``,
            ``mbpp``, ``apps``, ``prompt_tests``.
        num_visible: tests shown as examples per row (the rest are hidden).
        skip_invalid: skip (and log) rows that cannot be read instead of raising.

    Raises:
        ConfigError: a row cannot be read (the message names the row and why),
            or two problems share an id.
    """
    if format not in FORMATS:
        raise ConfigError(f"format must be one of {FORMATS}, got {format!r}.")
    check_number("num_visible", num_visible, minimum=0)
    rows, prefix = _rows(source)
    problems: list[Problem] = []
    for index, row in enumerate(rows):
        try:
            problems.append(_read_row(row, index, format, num_visible, prefix))
        except ConfigError as exc:
            if not skip_invalid:
                raise
            _log.warning("Skipped row %d: %s", index, exc)
    repeated = sorted(name for name, count in Counter(p.id for p in problems).items() if count > 1)
    if repeated:
        raise ConfigError(f"Problem ids must be unique; repeated: {repeated[:10]}.")
    return problems


# -- sources ----------------------------------------------------------------------


def _rows(source: Any) -> tuple[Iterable[Any], str]:
    """The rows of ``source`` and the prefix of the ids made up for rows without one."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        return _read_file(path), f"{path.stem}-"
    if isinstance(getattr(source, "column_names", None), dict):
        raise ConfigError(
            f"Got a DatasetDict with splits {sorted(source.column_names)}; pass one split, "
            "e.g. dataset['train']."
        )
    if isinstance(source, Mapping) or not isinstance(source, Iterable):
        raise ConfigError(
            "source must be a .jsonl/.json/.parquet path, a datasets.Dataset or a list of rows, "
            f"got {type(source).__name__}."
        )
    return source, "problem-"


def _read_file(path: Path) -> list[Any]:
    if not path.is_file():
        raise ConfigError(
            f"No problem file at {str(path)!r}; give a .jsonl, .json or .parquet file."
        )
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise MissingDependencyError(
                f"Reading Parquet needs pyarrow: {MissingDependencyError.install_hint('rollout', 'pyarrow')}."
            ) from None
        return pq.read_table(path).to_pylist()
    text = path.read_text("utf-8")
    if suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ConfigError(f"{path}, line {number}: not valid JSON ({exc}).") from None
        return rows
    if suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc}).") from None
        if not isinstance(data, list):
            raise ConfigError(
                f"{path} must hold a JSON list of problems, got {type(data).__name__}."
            )
        return data
    raise ConfigError(f"Cannot read {path.name!r}: use a .jsonl, .json or .parquet file.")


# -- rows -------------------------------------------------------------------------


def _detect(row: Mapping[str, Any]) -> str:
    if "statement" in row and ("visible" in row or "hidden" in row):
        return "native"
    if "test_list" in row:
        return "mbpp"
    if "input_output" in row:
        return "apps"
    if "prompt" in row and "tests" in row:
        return "prompt_tests"
    raise ConfigError(
        f"Cannot tell the format from the columns {sorted(row)}: expected native "
        "(statement, visible, hidden), MBPP (text, test_list), APPS (question, input_output) "
        "or prompt/tests columns."
    )


def _read_row(row: Any, index: int, format: str, num_visible: int, prefix: str) -> Problem:
    if isinstance(row, Problem):
        return row
    if not isinstance(row, Mapping):
        raise ConfigError(f"Row {index} must be a dict, got {type(row).__name__}.")
    kind = _detect(row) if format == "auto" else format
    reader = {"native": _native, "mbpp": _mbpp, "apps": _apps, "prompt_tests": _prompt_tests}[kind]
    try:
        return reader(row, num_visible, _row_id(row, f"{prefix}{index}"))
    except ConfigError as exc:
        raise ConfigError(f"Row {index} ({kind}): {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"Row {index} ({kind}) is malformed: {why}") from None


def _row_id(row: Mapping[str, Any], default: str) -> str:
    for key in ("id", "task_id", "problem_id", "name"):
        if row.get(key) not in (None, ""):
            return str(row[key])
    return default


def _native(row: Mapping[str, Any], num_visible: int, problem_id: str) -> Problem:
    return Problem.from_dict({**row, "id": problem_id})


def _split(tests: list[TestCase], num_visible: int) -> dict[str, tuple[TestCase, ...]]:
    if not tests:
        raise ConfigError("it has no tests.")
    return {"visible": tuple(tests[:num_visible]), "hidden": tuple(tests[num_visible:])}


def _mbpp(row: Mapping[str, Any], num_visible: int, problem_id: str) -> Problem:
    statement = row.get("text") or row.get("prompt")
    asserts = [str(test) for test in row["test_list"]]
    challenge = [str(test) for test in row.get("challenge_test_list") or ()]
    code = row.get("code") or ""
    entry = _called_name(asserts[0] if asserts else "") or _first_def(code)
    split = _split([_assert_test(test) for test in asserts], num_visible)
    split["hidden"] += tuple(_assert_test(test) for test in challenge)
    return Problem(
        id=problem_id, statement=statement or "", entry_point=entry,
        signature=_def_line(code, entry),
        setup=_with_imports(row.get("test_setup_code") or "", asserts + challenge), **split,
    )


def _apps(row: Mapping[str, Any], num_visible: int, problem_id: str) -> Problem:
    spec = row["input_output"]
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as exc:
            raise ConfigError(f"input_output is not valid JSON ({exc}).") from None
    entry = spec.get("fn_name") if isinstance(spec, Mapping) else None
    return Problem(
        id=problem_id, statement=row.get("question") or "", entry_point=entry,
        signature=(row.get("starter_code") or None) if entry else None,
        **_split(_io_tests(spec, entry), num_visible),
    )


def _io_tests(spec: Any, entry: str | None) -> list[TestCase]:
    """Tests of an APPS-style ``{"inputs": [...], "outputs": [...]}`` object."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("inputs"), list):
        raise ConfigError(f"input_output needs 'inputs' and 'outputs' lists, got {spec!r:.200}.")
    inputs, outputs = spec["inputs"], spec.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        raise ConfigError("input_output needs as many 'outputs' as 'inputs'.")
    if entry:
        return [
            TestCase("call", list(args) if isinstance(args, list) else [args], out,
                     (out[0],) if isinstance(out, list) and len(out) == 1 else ())
            for args, out in zip(inputs, outputs, strict=True)
        ]
    return [TestCase("stdio", _lines(stdin), _lines(out))
            for stdin, out in zip(inputs, outputs, strict=True)]


def _lines(text: Any) -> str:
    if isinstance(text, list):
        return "\n".join(str(line) for line in text) + "\n"
    if not isinstance(text, str):
        raise ConfigError(f"stdin/stdout must be text or a list of lines, got {text!r:.100}.")
    return text


def _prompt_tests(row: Mapping[str, Any], num_visible: int, problem_id: str) -> Problem:
    statement = _prompt_text(row["prompt"])
    tests, setup, entry = row["tests"], str(row.get("setup") or ""), row.get("entry_point")
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except ValueError:
            tests, imports = _asserts_in_source(tests)
            setup = "\n".join(filter(None, [setup, *imports]))
    if isinstance(tests, Mapping):
        entry = entry or tests.get("fn_name")
        cases = _io_tests(tests, entry)
    elif isinstance(tests, list) and all(isinstance(test, str) for test in tests):
        entry = entry or (_called_name(tests[0]) if tests else None)
        cases = [_assert_test(test) for test in tests]
        setup = _with_imports(setup, tests)
    elif isinstance(tests, list) and all(isinstance(test, Mapping) for test in tests):
        cases = [_mapping_test(test) for test in tests]
    else:
        raise ConfigError(f"tests must be asserts, an inputs/outputs object or a list of "
                          f"input/output objects, got {tests!r:.200}.")
    signature = row.get("signature") or row.get("starter_code") or None
    return Problem(id=problem_id, statement=statement, entry_point=entry or None,
                   signature=signature, setup=setup, **_split(cases, num_visible))


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):  # chat messages: the last user turn is the task
        users = [message.get("content") for message in prompt
                 if isinstance(message, Mapping) and message.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    raise ConfigError(
        f"prompt must be text or chat messages with a user turn, got {prompt!r:.200}."
    )


def _mapping_test(test: Mapping[str, Any]) -> TestCase:
    if "input" in test and "output" in test:
        return TestCase("stdio", _lines(test["input"]), _lines(test["output"]))
    return TestCase.from_dict(test)


# -- asserts ----------------------------------------------------------------------


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise ConfigError(f"a test is not valid Python ({exc}): {source!r:.200}") from None


def _assert_test(source: str) -> TestCase:
    """``assert <expr> == <literal>`` as an expr test (the literal stays outside); else as is."""
    tree = _parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise ConfigError(f"a test must be one assert statement, got {source!r:.200}.")
    check = tree.body[0].test
    if isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], ast.Eq):
        try:
            expected = ast.literal_eval(check.comparators[0])
        except (ValueError, TypeError, SyntaxError, RecursionError):
            pass  # not a plain value: run the assert itself
        else:
            return TestCase("expr", ast.unparse(check.left), expected)
    return TestCase("assert", source.strip())


def _asserts_in_source(source: str) -> tuple[list[str], list[str]]:
    """The asserts and the imports of a block of test code."""
    asserts, imports = [], []
    for node in _parse(source).body:
        if isinstance(node, ast.Assert):
            asserts.append(ast.unparse(node))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
        else:
            raise ConfigError(f"test code must be assert statements (and imports), found "
                              f"{type(node).__name__} at line {node.lineno}.")
    return asserts, imports


def _called_name(source: str) -> str | None:
    """The name of the first plain function called in ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and not hasattr(builtins, node.func.id)):
            return node.func.id
    return None


def _first_def(code: str) -> str | None:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    return next((node.name for node in tree.body if isinstance(node, ast.FunctionDef)), None)


def _def_line(code: str, name: str | None) -> str | None:
    """``def name(args):`` of the function ``name`` in the reference code, if there."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
            return f"def {name}({ast.unparse(node.args)}){returns}:"
    return None


def _with_imports(setup: str, tests: list[str]) -> str:
    used = [name for name in _TEST_MODULES
            if any(re.search(rf"\b{name}\.", test) for test in tests)
            and not re.search(rf"\bimport {name}\b", setup)]
    return "\n".join(filter(None, [setup, *(f"import {name}" for name in used)]))

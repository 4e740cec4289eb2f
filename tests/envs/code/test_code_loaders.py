"""load_problems: MBPP, APPS and prompt/tests rows from real JSONL and Parquet files."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentgym.envs.code import Problem, builtin_problems, evaluate, load_problems
from agentgym.errors import ConfigError
from agentgym.sandbox import Sandbox

MBPP = [
    {"task_id": 11, "text": "Remove the first and last occurrence of a character from a string.",
     "code": "def remove_occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
             "    return s if i < 0 else s[:i] + s[i + 1:]",
     "test_list": ['assert remove_occ("hello","l") == "heo"', 'assert remove_occ("abcda","a") == "bcd"',
                   'assert remove_occ("PHP","P") == "H"'],
     "test_setup_code": "", "challenge_test_list": ['assert remove_occ("aaa", "a") == "a"']},
    {"task_id": 2, "text": "Find the shared elements of two lists.",
     "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
     "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                   "assert math.isclose(len(similar_elements((1, 2), (2, 3))), 1)"],
     "test_setup_code": "", "challenge_test_list": []},
]
APPS = [
    {"problem_id": 4001, "question": "Read two integers and print their sum.", "starter_code": "",
     "input_output": json.dumps({"inputs": ["1 2\n", ["3", "4"], "10 -10\n"],
                                 "outputs": ["3\n", ["7"], "0\n"]})},
    {"problem_id": 4002, "question": "Add two numbers.",
     "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n",
     "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4], [0, 0]],
                                 "outputs": [[3], 7, [0]]})},
]
PROMPT_TESTS = [
    {"id": "double", "prompt": [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Write double(x) that doubles x."}],
     "tests": ["assert double(2) == 4", "assert double(-1) == -2", "assert double(0.5) == 1.0"]},
    {"id": "echo", "prompt": "Print the input back.",
     "tests": json.dumps([{"input": "hi\n", "output": "hi\n"}, {"input": "yo", "output": "yo"}])},
    {"id": "square", "prompt": "Write sq(x).", "entry_point": "sq",
     "tests": "import math\nassert sq(3) == 9\nassert math.sqrt(sq(4)) == 4"},
]
# One schema for every row, as a real split has: prompts as text, tests as assert lists.
PROMPT_SPLIT = [
    {"id": "double", "prompt": "Write double(x).", "tests": ["assert double(2) == 4", "assert double(0) == 0"]},
    {"id": "triple", "prompt": "Write triple(x).", "tests": ["assert triple(1) == 3", "assert triple(2) == 6"]},
]
SOLUTIONS = {
    "11": MBPP[0]["code"], "2": MBPP[1]["code"], "4001": "print(sum(map(int, open(0).read().split())))",
    "4002": "class Solution:\n    def add(self, a, b):\n        return a + b",
    "double": "def double(x):\n    return 2 * x", "echo": "print(input())", "square": "def sq(x):\n    return x * x",
}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_mbpp_rows_become_function_problems() -> None:
    first, second = load_problems(MBPP)
    assert first.id == "11" and first.entry_point == "remove_occ"
    assert first.signature == "def remove_occ(s, ch):"
    assert [t.kind for t in first.visible] == ["expr"] and len(first.hidden) == 3
    assert first.visible[0].input == "remove_occ('hello', 'l')" and first.visible[0].expected == "heo"
    # A comparison with a non-literal side runs as an assert; math is imported for it.
    assert [t.kind for t in second.tests] == ["assert", "assert"]
    assert second.setup == "import math"


def test_apps_rows_become_program_or_call_problems() -> None:
    program, call = load_problems(APPS, num_visible=2)
    assert program.mode == "stdio" and program.entry_point is None
    assert program.visible[1].input == "3\n4\n" and program.visible[1].expected == "7\n"
    assert call.entry_point == "add" and call.signature.startswith("class Solution:")
    assert call.visible[0].expected == [3] and call.visible[0].alternatives == (3,)


def test_prompt_tests_rows_in_their_three_test_shapes() -> None:
    double, echo, square = load_problems(PROMPT_TESTS, num_visible=0)
    assert double.statement == "Write double(x) that doubles x." and double.entry_point == "double"
    assert double.visible == () and len(double.hidden) == 3
    assert echo.mode == "stdio" and len(echo.hidden) == 2
    assert square.setup == "import math" and [t.kind for t in square.tests] == ["expr", "expr"]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_datasets_reads_the_files_and_the_split_loads(tmp_path: Path, suffix: str) -> None:
    write = write_jsonl if suffix == "jsonl" else write_parquet
    for name, rows in (("mbpp", MBPP), ("apps", APPS), ("prompts", PROMPT_SPLIT)):
        path = write(tmp_path / f"{name}.{suffix}", rows)
        builder = "json" if suffix == "jsonl" else "parquet"
        split = datasets.load_dataset(builder, data_files=str(path), split="train",
                                      cache_dir=str(tmp_path / "cache"))
        from_split = load_problems(split)
        assert [p.id for p in from_split] == [str(row.get("task_id", row.get("problem_id", row.get("id"))))
                                              for row in rows]
        assert [p.id for p in load_problems(path)] == [p.id for p in from_split]


def test_loaded_problems_are_solved_by_their_solutions(sandbox: Sandbox) -> None:
    problems = load_problems(MBPP) + load_problems(APPS) + load_problems(PROMPT_TESTS)
    for problem in problems:
        assert evaluate(sandbox, problem, SOLUTIONS[problem.id]).score == 1.0, problem.id
    wrong = evaluate(sandbox, problems[0], "def remove_occ(s, ch):\n    return s.replace(ch, '')")
    assert wrong.visible[0].passed and wrong.score < 1.0


def test_native_rows_and_problems_pass_through(tmp_path: Path) -> None:
    native = [problem.to_dict() for problem in builtin_problems()[:3]]
    path = write_jsonl(tmp_path / "mine.jsonl", native)
    assert load_problems(path) == list(builtin_problems()[:3])
    (tmp_path / "mine.json").write_text(json.dumps(native))
    assert load_problems(tmp_path / "mine.json") == list(builtin_problems()[:3])
    assert load_problems(builtin_problems()) == list(builtin_problems())


def test_rows_without_ids_get_ids_from_the_file(tmp_path: Path) -> None:
    rows = [{"prompt": "Write f.", "tests": ["assert f() == 1"]}] * 2
    path = write_jsonl(tmp_path / "set.jsonl", rows)
    assert [p.id for p in load_problems(path)] == ["set-0", "set-1"]
    assert [p.id for p in load_problems(rows)] == ["problem-0", "problem-1"]


def test_a_dataset_dict_asks_for_a_split() -> None:
    dataset = datasets.DatasetDict({"train": datasets.Dataset.from_list(PROMPT_TESTS[:1])})
    with pytest.raises(ConfigError, match=r"pass one split, e.g. dataset\['train'\]"):
        load_problems(dataset)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"question": "q"}], "Cannot tell the format"),
        ([{"question": "q", "input_output": "{not json"}], "not valid JSON"),
        ([{"question": "q", "input_output": json.dumps({"inputs": ["1"], "outputs": []})}],
         "as many 'outputs'"),
        ([{"prompt": "p", "tests": "x = 1\nassert f() == 1"}], "must be assert statements"),
        ([{"prompt": "p", "tests": 5}], "tests must be asserts"),
        ([{"prompt": "p", "tests": []}], "it has no tests"),
        ([{"prompt": 3, "tests": ["assert f() == 1"]}], "prompt must be text"),
        ([{"text": "t", "test_list": ["assert f(1) ==="]}], "not valid Python"),
        ([{"id": "a", "prompt": "p", "tests": ["assert f() == 1"]}] * 2, r"repeated: \['a'\]"),
        ([3], "must be a dict"),
    ],
)
def test_unreadable_rows_say_which_and_why(rows: list, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_problems(rows)


def test_bad_rows_can_be_skipped(caplog: pytest.LogCaptureFixture) -> None:
    rows = [{"question": "q"}, PROMPT_TESTS[0]]
    assert [p.id for p in load_problems(rows, skip_invalid=True)] == ["double"]
    assert "Skipped row 0" in caplog.text


@pytest.mark.parametrize(
    ("source", "kwargs", "message"),
    [
        ("/nonexistent/problems.jsonl", {}, "No problem file at"),
        ({"prompt": "p"}, {}, "source must be"),
        (PROMPT_TESTS, {"format": "leetcode"}, "format must be one of"),
        (PROMPT_TESTS, {"num_visible": -1}, "num_visible must be at least 0"),
    ],
)
def test_bad_sources_and_options_are_config_errors(source: object, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_problems(source, **kwargs)  # type: ignore[arg-type]


def test_an_unknown_file_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "problems.csv"
    path.write_text("a,b\n")
    with pytest.raises(ConfigError, match="use a .jsonl, .json or .parquet file"):
        load_problems(path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n{oops\n')
    with pytest.raises(ConfigError, match="line 2: not valid JSON"):
        load_problems(bad)


def test_a_forced_format_reads_rows_as_that_format() -> None:
    row = {"prompt": "Write f.", "tests": ["assert f() == 1"], "test_list": ["assert g() == 2"]}
    assert load_problems([row])[0].entry_point == "g"  # auto: test_list means MBPP
    assert load_problems([row], format="prompt_tests")[0].entry_point == "f"
    assert isinstance(load_problems([row])[0], Problem)

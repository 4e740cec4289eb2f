"""load_math_dataset on small GSM8K- and MATH-style files written here, read by ``datasets``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.envs.math.env import MathEnv
from agentgym.envs.math.loading import extract_reference, load_math_dataset, problems_from_rows
from agentgym.errors import ConfigError
from fakes import write_jsonl, write_parquet

pytest.importorskip("datasets")

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples?",
     "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"},
    {"question": "A pen costs $2. How much do 600 pens cost?",
     "answer": "600 * 2 = <<600*2=1200>>1200\n#### 1,200"},
    {"question": "Half of 9?", "answer": "9 / 2 = 4.5\n#### 4.5."},
]
MATH_ROWS = [
    {"problem": r"What is $\frac{1}{2} + \frac{1}{3}$?",
     "solution": r"We get $\frac{3}{6} + \frac{2}{6} = \boxed{\frac{5}{6}}$.", "level": "Level 1"},
    {"problem": "Solve $x^2 = 4$ for $x > 0$.",
     "solution": r"First $\boxed{-2}$ is out since $x>0$, so $x = \boxed{2}$.", "level": "Level 2"},
    {"problem": "No box here.", "solution": "The answer is 3.", "level": "Level 1"},
]


@pytest.mark.parametrize(("text", "style", "expected"), [
    ("3 + 4 = 7\n#### 7", "auto", "7"),
    ("#### 1,200", "gsm8k", "1,200"),
    ("so it is 4.5\n####  4.5. ", "auto", "4.5"),
    ("a #### b\n#### 12", "auto", "12"),  # the last mark counts
    (r"$\boxed{\frac{5}{6}}$", "auto", r"\frac{5}{6}"),
    (r"\boxed{1} then \boxed{2}", "math", "2"),
    (r"\fbox{x^{2}}", "math", "x^{2}"),
    ("just 42 ", "auto", "just 42"),
    ("just 42 ", "plain", "just 42"),
    (r"$\boxed{7}$ #### 9", "plain", r"$\boxed{7}$ #### 9"),
    ("no mark", "gsm8k", None),
    ("no box", "math", None),
    ("####", "auto", None),
    ("  ", "auto", None),
])
def test_extract_reference(text: str, style: str, expected: str | None) -> None:
    assert extract_reference(text, style) == expected


def test_an_unknown_answer_style_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="answer_style must be one of .*got 'latex'"):
        extract_reference("1", "latex")


def test_gsm8k_jsonl_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS)
    problems = load_math_dataset(path, cache_dir=tmp_path / "cache")
    assert [p.answer for p in problems] == ["7", "1,200", "4.5"]
    assert problems[0].question == GSM8K_ROWS[0]["question"] and problems[0].kind == "dataset"


def test_math_parquet_file_with_its_own_columns_skips_rows_without_a_box(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "math.parquet", MATH_ROWS)
    problems = load_math_dataset(str(path), question_column="problem", answer_column="solution",
                                 answer_style="math", cache_dir=tmp_path / "cache")
    assert [p.answer for p in problems] == [r"\frac{5}{6}", "2"]


def test_a_folder_of_files_and_a_limit(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", GSM8K_ROWS[:2])
    write_jsonl(tmp_path / "b.jsonl", GSM8K_ROWS[2:])
    assert len(load_math_dataset(tmp_path, cache_dir=tmp_path / "cache")) == 3
    assert len(load_math_dataset(tmp_path, limit=2, cache_dir=tmp_path / "cache")) == 2


def test_a_datasets_dataset_is_read_as_it_is() -> None:
    import datasets

    problems = load_math_dataset(datasets.Dataset.from_list(GSM8K_ROWS))
    assert [p.answer for p in problems] == ["7", "1,200", "4.5"]


def test_loaded_problems_play_in_the_env(tmp_path: Path) -> None:
    problems = load_math_dataset(write_jsonl(tmp_path / "g.jsonl", GSM8K_ROWS),
                                 cache_dir=tmp_path / "cache")
    env = MathEnv(problems=problems)
    env.reset(options={"index": 1})
    _, reward, terminated, _, info = env.step(r"600 pens cost \boxed{\$1200}.")
    assert reward == 1.0 and terminated and info["success"]


def test_a_missing_column_names_the_columns_there_are(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "math.parquet", MATH_ROWS)
    with pytest.raises(ConfigError, match=r"no column 'question'.*'problem', 'solution', 'level'"):
        load_math_dataset(path, cache_dir=tmp_path / "cache")


def test_no_usable_row_and_no_file_are_config_errors(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "no mark"}])
    with pytest.raises(ConfigError, match="No row .* has a question and a 'gsm8k'-style answer"):
        load_math_dataset(path, answer_style="gsm8k", cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match="No data file at .*missing.jsonl"):
        load_math_dataset(tmp_path / "missing.jsonl")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match=r"is not a \.parquet, \.jsonl, \.json or \.csv file"):
        load_math_dataset(tmp_path / "notes.txt")
    with pytest.raises(ConfigError, match="limit must be a positive integer"):
        load_math_dataset(path, limit=0)


def test_rows_with_missing_fields_are_skipped() -> None:
    rows = [{"question": "q1", "answer": "#### 1"}, {"question": None, "answer": "#### 2"},
            {"question": "q3"}, {"question": "  ", "answer": "#### 4"}, {"question": "q5", "answer": 5}]
    assert [p.answer for p in problems_from_rows(rows)] == ["1"]

"""Metrics sinks (JSONL, TensorBoard) and the HTML report."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest

from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.rollout.rows import Message
from agentgym.trainers.loop.metrics import MetricsLogger, read_jsonl, step_line
from agentgym.trainers.loop.report import render_report, svg_chart, write_report
from agentgym.trainers.settings import TrainConfig


def _config(**changes: object) -> TrainConfig:
    return TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "steps": 5, **changes})


def test_jsonl_has_one_record_per_step_and_resume_drops_later_ones(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, _config()) as log:
        for step in range(4):  # the loop's indices 0 to 3: the console's steps 1 to 4
            log.log(step, {"success": step / 4, "reward": 0.1 * step, "loss": float("nan")})
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]  # numbered as the console numbers them
    assert records[2]["success"] == 0.5 and records[0]["loss"] is None  # NaN is not JSON: null
    with (tmp_path / "metrics.jsonl").open("a") as file:
        file.write('{"step": 5, "succ')  # a torn line from a crash
    with MetricsLogger(tmp_path, _config(), start_step=2):  # resumed after step 2
        pass
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2]


def test_the_console_and_the_file_give_a_step_the_same_number(tmp_path: Path) -> None:
    """Issue 50: the console's last line said step 40/40 and metrics.jsonl "step": 39."""
    from io import StringIO

    from rich.console import Console

    console = Console(file=StringIO(), width=200)
    with MetricsLogger(tmp_path, _config(steps=40), start_step=39, console=console) as log:
        log.log(39, {"success": 0.9})
    assert "step 40/40" in console.file.getvalue()
    assert read_jsonl(tmp_path / "metrics.jsonl") == [{"step": 40, "success": 0.9}]


def test_the_warm_up_s_losses_are_kept_and_a_second_warm_up_replaces_them(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, _config()) as log:
        log.log_warmup([6.9, 2.5, float("nan")])
    assert read_jsonl(tmp_path / "warmup.jsonl") == [{"step": 1, "loss": 6.9}, {"step": 2, "loss": 2.5},
                                                     {"step": 3, "loss": None}]
    with MetricsLogger(tmp_path, _config()) as log:  # resumed before the first checkpoint: warmed up again
        log.log_warmup([7.0, 0.1])
    assert [r["loss"] for r in read_jsonl(tmp_path / "warmup.jsonl")] == [7.0, 0.1]


def test_episodes_jsonl_has_a_line_per_episode_and_resume_drops_later_steps(tmp_path: Path, make_row) -> None:
    """One line per episode (its first row; later rows of a multi-turn episode add none)."""
    with MetricsLogger(tmp_path, _config()) as log:
        for step in range(3):
            log.log_episodes(step, [make_row(reward=1.0, seed=step, index=0), make_row(reward=0.0, seed=step, index=1),
                                    make_row(reward=0.0, seed=step, index=1, row_index=1)])
    lines = read_jsonl(tmp_path / "episodes.jsonl")
    assert [(e["step"], e["episode_id"], e["success"]) for e in lines[:2]] == [
        (1, "Bandit-LLM-v0/s0/g0/e0", True), (1, "Bandit-LLM-v0/s0/g0/e1", False)]
    assert len(lines) == 6 and lines[5] == {"step": 3, "episode_id": "Bandit-LLM-v0/s2/g0/e1", "seed": 2,
                                            "reward": 0.0, "success": False, "turns": 1,
                                            "stop_reason": "terminated"}
    with MetricsLogger(tmp_path, _config(), start_step=1):
        pass
    assert [e["step"] for e in read_jsonl(tmp_path / "episodes.jsonl")] == [1, 1]
    with MetricsLogger(tmp_path / "off", _config(log_episodes=False)) as log:
        log.log_episodes(0, [make_row()])
    assert not (tmp_path / "off" / "episodes.jsonl").exists()


def test_a_disabled_logger_writes_nothing(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path / "run", _config(), enabled=False) as log:
        log.log(0, {"success": 1.0})
    assert not (tmp_path / "run").exists()


def test_tensorboard_events_are_written(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsLogger(tmp_path, _config(tensorboard=True)) as log:
        for step in range(3):
            log.log(step, {"success": step / 2, "time/train": 1.5})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("success")] == [(1, 0.0), (2, 0.5), (3, 1.0)]


def test_missing_wandb_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"scripts/setup.sh wandb"):
        MetricsLogger(tmp_path, _config(wandb=True))


def test_step_line_reads_well() -> None:
    line = step_line(2, 40, {"reward": 0.5, "success": 0.875, "time/rollout": 1.25, "time/train": 2.0})
    assert line == "step 3/40  reward 0.500  success 88%  (rollout 1.2s, train 2.0s)"


def test_chart_is_inline_svg_with_the_points() -> None:
    svg = svg_chart("Success", {"success": [(1, 0.5), (2, 0.75), (3, 1.0)]})
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert len(re.findall(r"[ML]\d", svg)) == 3
    assert "no data" in svg_chart("Empty", {})


def test_report_is_one_offline_page_with_curves_and_escaped_episodes(tmp_path: Path, make_row) -> None:
    config = _config(out=str(tmp_path))
    config.save_yaml(tmp_path / "config.yaml")
    row = make_row().model_copy(update={"messages": [
        Message(role="system", content="rules"), Message(role="user", content="Choose."),
        Message(role="assistant", content="<script>alert(1)</script><answer>Dragon</answer>\x00")]})
    with MetricsLogger(tmp_path, config) as log:
        for step in range(3):
            log.log(step, {"success": 0.5 + step / 4, "reward": step / 3, "loss": 0.1, "kl": 0.0,
                           "train_tokens_per_s": 1000.0 + step, "time/rollout": 1.0, "time/train": 2.0})
            log.log_samples(step, [row])
    path = write_report(tmp_path)
    page = path.read_text()
    assert path == tmp_path / "report.html"
    assert page.count("<svg") >= 6 and "Success rate" in page and "Training tokens/s" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x00" not in page and "&lt;/answer&gt;\ufffd" in page  # a NUL made the page a binary file
    # Readable offline: nothing is fetched from anywhere.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "episodes" not in json.dumps(read_jsonl(tmp_path / "metrics.jsonl")[0])
    assert "step 1:" in page and "step 3:" in page  # episodes of the first and the last step
    raw = page.split("Raw metrics (last step)</h2><pre>", 1)[1].split("</pre>", 1)[0]
    assert json.loads(html.unescape(raw))["step"] == 3  # the last step's number, as everywhere else
    success = re.search(r'aria-label="Success rate".*?</svg>', page)[0]
    ticks = [float(x) for x in re.findall(r'text-anchor="middle" class="axis">([\d.]+)<', success)]
    assert (ticks[0], ticks[-1]) == (1, 3)  # the steps' axis runs from step 1 to step 3
    assert "Format warm-up" not in page  # this run had none


def test_the_report_draws_the_format_warm_up(tmp_path: Path) -> None:
    """Issue 50: the warm-up's loss (6.9 to 0.1 on the tiny model) was printed but not drawn."""
    with MetricsLogger(tmp_path, _config()) as log:
        log.log_warmup([6.9, 3.0, 1.0, 0.1])
        log.log(0, {"success": 0.5})
    page = render_report(tmp_path)
    chart = re.search(r'<svg class="chart"[^>]*aria-label="Format warm-up: loss".*?</svg>', page)
    assert chart is not None and page.index("Format warm-up") < page.index('aria-label="Success rate"')
    assert len(re.findall(r"[ML]\d", chart[0])) == 4 and ">warm-up step<" in chart[0]


def test_report_of_a_folder_without_metrics_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no metrics\.jsonl: give the --out folder"):
        render_report(tmp_path)


@pytest.mark.parametrize(("low", "high"), [(0.17, 1.03), (0.45, 0.55), (-0.07, 0.1), (0.0, 800.0), (5.0, 5.0001)])
def test_every_axis_gets_at_least_three_round_ticks_inside_its_range(low: float, high: float) -> None:
    from agentgym.trainers.loop.report import _ticks

    ticks = _ticks(low, high)
    assert len(ticks) >= 3 and all(low - 1e-9 <= t <= high + 1e-9 for t in ticks)
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1  # evenly spaced

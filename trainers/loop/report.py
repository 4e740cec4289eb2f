"""``agentgym report DIR``: one self-contained HTML page about a training run, readable offline.

The page draws the run's curves (the format warm-up's loss, then reward,
success, loss, KL, entropy, tokens/s, the time split) as inline SVG,
written here with no plotting library and no script, so it opens
anywhere, shows the run's settings, and
a few sampled episodes (first and last steps) as conversations. Every piece
of text from the run (episodes are model output: untrusted) is HTML-escaped.

    path = write_report("runs/bandit")     # runs/bandit/report.html
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError
from agentgym.trainers.loop.metrics import METRICS_FILE, SAMPLES_FILE, WARMUP_FILE, read_jsonl

__all__ = ["CHARTS", "EVAL_FILE", "WARMUP_CHART", "render_report", "svg_chart", "write_report"]

#: results of ``agentgym eval`` on the run's model, written by that command into the run folder
EVAL_FILE = "eval.json"

#: the chart of warmup.jsonl, before the others (its steps are the warm-up's own, not the run's)
WARMUP_CHART = "Format warm-up: loss"
#: (title, metric keys drawn together) of each chart of metrics.jsonl, in page order
CHARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Reward", ("reward",)),
    ("Success rate", ("success", "valid_actions")),
    ("Loss", ("loss",)),
    ("KL to the reference", ("kl",)),
    ("KL to the teacher", ("forward_kl", "reverse_kl")),
    ("Teacher logprob of the tokens", ("teacher_logprob",)),
    ("DPO: implicit rewards", ("chosen_reward", "rejected_reward", "reward_margin")),
    ("DPO: held-out pair accuracy", ("reward_accuracy",)),
    ("Entropy", ("entropy",)),
    ("Clip fraction", ("clip_fraction",)),
    ("PPO: policy and value loss", ("policy_loss", "value_loss")),
    ("PPO: the critic", ("explained_variance", "value_clip_fraction")),
    ("PPO: value, return, advantage", ("value_mean", "return_mean", "advantage_mean")),
    ("Training tokens/s", ("train_tokens_per_s",)),
    ("Time per step (s)", ("time/rollout", "time/waiting", "time/train", "time/sync")),
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # all but tab, newline, carriage return
_COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea")
_W, _H, _PAD_L, _PAD_R, _PAD_T, _PAD_B = 420, 220, 52, 12, 28, 30


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round values between ``low`` and ``high``: about ``count``, never fewer than three."""
    if high <= low:
        return [low]
    nice = [factor * 10 ** power for power in range(math.floor(math.log10(high - low)) - 2,
                                                     math.floor(math.log10(high - low)) + 2)
            for factor in (1, 2, 5)]
    raw = (high - low) / count
    for step in sorted((s for s in nice if s <= raw * 1.5), reverse=True) + sorted(nice):
        first = math.ceil(low / step) * step
        ticks = [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]
        if len(ticks) >= 3:
            return ticks
    return [low, (low + high) / 2, high]


def _fmt(value: float) -> str:
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.1e}"
    return f"{value:,.4g}"


def svg_chart(title: str, series: dict[str, Sequence[tuple[float, float]]], *, x_label: str = "step") -> str:
    """A line chart of ``{name: [(x, y), ...]}`` as an inline ``<svg>`` element."""
    points = [p for values in series.values() for p in values]
    parts = [f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{_PAD_L}" y="16" class="title">{html.escape(title)}</text>']
    if not points:
        parts.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle" class="muted">no data</text></svg>')
        return "".join(parts)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5
    margin = (y1 - y0) * 0.05
    y0, y1 = y0 - margin, y1 + margin
    width, height = _W - _PAD_L - _PAD_R, _H - _PAD_T - _PAD_B

    def px(x: float) -> float:
        return _PAD_L + (x - x0) / (x1 - x0) * width

    def py(y: float) -> float:
        return _PAD_T + (1 - (y - y0) / (y1 - y0)) * height

    for tick in _ticks(y0, y1):
        parts.append(f'<line x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" class="grid"/>'
                     f'<text x="{_PAD_L - 4}" y="{py(tick) + 3:.1f}" text-anchor="end" class="axis">{_fmt(tick)}</text>')
    for tick in _ticks(x0, x1):
        parts.append(f'<text x="{px(tick):.1f}" y="{_H - 12}" text-anchor="middle" class="axis">{_fmt(tick)}</text>')
    parts.append(f'<text x="{_W - _PAD_R}" y="{_H - 1}" text-anchor="end" class="axis">{html.escape(x_label)}</text>')
    for i, (name, values) in enumerate(series.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        path = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(values))
        parts.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        if len(values) == 1:
            x, y = values[0]
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        if len(series) > 1:
            parts.append(f'<text x="{_W - _PAD_R - 4}" y="{16 + 12 * i}" text-anchor="end" fill="{colour}" '
                         f'class="legend">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _series(records: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = {}
    for key in keys:
        values = [(float(r["step"]), float(r[key])) for r in records
                  if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        if values:
            series[key] = values
    return series


def _summary(records: list[dict[str, Any]]) -> str:
    if not records:
        return "<p>No steps logged yet.</p>"
    first, last = records[0], records[-1]
    rows = []
    for key in ("reward", "success", "loss", "kl", "entropy", "train_tokens_per_s"):
        if isinstance(first.get(key), (int, float)) and isinstance(last.get(key), (int, float)):
            rows.append(f"<tr><td>{key}</td><td>{_fmt(first[key])}</td><td>{_fmt(last[key])}</td></tr>")
    seconds = sum(float(r.get("time/step") or 0.0) for r in records)
    return ("<table><tr><th>metric</th><th>first step</th><th>last step</th></tr>" + "".join(rows)
            + f"</table><p>{len(records)} steps logged, {seconds:,.0f} s of training loop.</p>")


def _evaluations(folder: Path) -> str:
    """The ``agentgym eval`` results kept in the run's eval.json, as a table ("" when none)."""
    path = folder / EVAL_FILE
    try:
        entries = json.loads(path.read_text(encoding="utf-8")).get("evals", []) if path.is_file() else []
    except (OSError, ValueError, AttributeError):
        return "<h2>Evaluation</h2><p>eval.json could not be read.</p>"
    rows = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        kwargs = ", ".join(f"{k}={v}" for k, v in dict(entry.get("env_kwargs") or {}).items())
        cells = [f"{entry.get('env_id', '')} {kwargs}".strip(), str(entry.get("policy", "")),
                 str(entry.get("episodes", "")), str(entry.get("seed_offset", ""))]
        for key, percent in (("success_rate", True), ("mean_turns", False), ("invalid_action_rate", True)):
            value = entry.get(key)
            cells.append(("" if not isinstance(value, (int, float)) else
                          f"{value:.1%}" if percent else f"{value:.1f}"))
        rows.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    if not rows:
        return ""
    head = "".join(f"<th>{name}</th>" for name in ("env", "model", "episodes", "first seed", "success",
                                                    "mean turns", "invalid actions"))
    return f"<h2>Evaluation (unseen seeds)</h2><table><tr>{head}</tr>{''.join(rows)}</table>"


def _model_text(text: str) -> str:
    """Model output as HTML text: escaped, and a control character (a random model's NUL: the page
    read as a binary file) shown as the replacement character, as a browser would show it."""
    return html.escape(_CONTROL.sub("\ufffd", text))


def _episodes(samples: list[dict[str, Any]], limit: int) -> str:
    if not samples:
        return "<p>No sampled episodes.</p>"
    steps = sorted({int(s["step"]) for s in samples})
    chosen_steps = steps[:1] + steps[-1:] if len(steps) > 1 else steps
    chosen = [s for s in samples if int(s["step"]) in chosen_steps][:limit]
    blocks = []
    for sample in chosen:
        verdict = "solved" if sample.get("success") else "not solved"
        messages = "".join(
            f'<div class="msg {html.escape(str(m.get("role", "")))}"><b>{html.escape(str(m.get("role", "")))}</b>'
            f'<pre>{_model_text(str(m.get("content", "")))}</pre></div>'
            for m in sample.get("messages", [])[1:])  # [0] is the system prompt (the env's instructions)
        blocks.append(f'<details open><summary>step {int(sample["step"])}: '
                      f'{html.escape(str(sample.get("episode_id", "")))}, reward {_fmt(float(sample.get("reward", 0.0)))}, '
                      f"{verdict}</summary>{messages}</details>")
    return "".join(blocks)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#111;max-width:1320px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
.charts{display:flex;flex-wrap:wrap;gap:10px}
.chart{width:420px;height:220px;border:1px solid #e5e7eb;border-radius:6px;background:#fff}
.chart .title{font-size:13px;font-weight:600}.chart .axis{font-size:10px;fill:#555}
.chart .legend{font-size:10px}.chart .grid{stroke:#eee}.muted{fill:#999;font-size:12px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
details{border:1px solid #e5e7eb;border-radius:6px;margin:8px 0;padding:6px 10px}
.msg pre{white-space:pre-wrap;margin:2px 0 8px;font-size:12px;background:#f8fafc;padding:6px}
.msg.assistant pre{background:#eff6ff}
"""


def render_report(run_dir: str | Path, *, episodes: int = 4) -> str:
    """The HTML of a run folder's report (reads metrics.jsonl, warmup.jsonl, samples.jsonl, config.yaml)."""
    folder = Path(run_dir)
    metrics_file = folder / METRICS_FILE
    if not metrics_file.exists():
        raise ConfigError(f"{str(folder)!r} has no {METRICS_FILE}: give the --out folder of an "
                          "`agentgym train` run.")
    records = read_jsonl(metrics_file)
    config_file = folder / "config.yaml"
    config_text = config_file.read_text(encoding="utf-8") if config_file.exists() else "(no config.yaml)"
    # A curve the run did not compute (no KL term, an SFT run's rollout numbers) gets no empty panel.
    drawn = [(title, series) for title, keys in CHARTS if (series := _series(records, keys)) or not records]
    charts = "".join(svg_chart(title, series) for title, series in drawn)
    if warmup := _series(read_jsonl(folder / WARMUP_FILE), ("loss",)):
        charts = svg_chart(WARMUP_CHART, warmup, x_label="warm-up step") + charts
    title = f"agentgym training run: {folder.resolve().name}"
    return (
        f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<h2>Summary</h2>{_summary(records)}{_evaluations(folder)}"
        f"<h2>Curves</h2><div class=\"charts\">{charts}</div>"
        f"<h2>Sampled episodes</h2>{_episodes(read_jsonl(folder / SAMPLES_FILE), episodes)}"
        f"<h2>Settings</h2><details><summary>config.yaml</summary><pre>{html.escape(config_text)}</pre></details>"
        f"<h2>Raw metrics (last step)</h2><pre>{html.escape(json.dumps(records[-1] if records else {}, indent=1))}</pre>"
        "</body></html>"
    )


def write_report(run_dir: str | Path, out: str | Path | None = None, *, episodes: int = 4) -> Path:
    """Write the report (default ``RUN_DIR/report.html``); returns its path."""
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_report(run_dir, episodes=episodes), encoding="utf-8")
    return target

"""Every ``--help`` screen at 80 columns: grouped, with defaults, readable (issue 50)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from agentgym.cli import app

runner = CliRunner()
WIDTH = 80
#: where an option's description may begin at the latest, so it keeps 35 of the 80 columns
DESCRIPTION_BY = WIDTH - 36
PANELS = {
    "train": ["What to train", "The model", "Each step", "The server", "Output", "Settings"],
    "eval": ["What to play", "The model", "Output", "Advanced"],
    "serve": ["The model", "Where it listens", "The built-in engine"],
    "rollout": ["What to play", "The model", "Output", "Advanced"],
}


def render(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)},
                           terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    return result.output


def every_command(group: typer.core.TyperGroup | None = None, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command and group of ``agentgym`` (the root as ())."""
    group = group if group is not None else typer.main.get_command(app)
    found = [path]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += every_command(command, (*path, name))
        else:
            found.append((*path, name))
    return found


def options_of(command: str) -> list[typer.core.TyperOption]:
    return [param for param in typer.main.get_command(app).commands[command].params if param.opts[0].startswith("-")]


@pytest.mark.parametrize("command", list(PANELS))
def test_a_help_screen_fits_80_columns_in_its_groups(command: str) -> None:
    output = render(command)
    lines = output.splitlines()
    assert max(len(line) for line in lines) <= WIDTH and "…" not in output  # nothing cut short
    titles = [match[1] for match in re.finditer(r"╭─ (.+?) ─", output)]
    assert titles == ["Options", *PANELS[command]]  # --help alone, then the groups in order
    assert "``" not in output  # docstring markup is written as the flag it names


@pytest.mark.parametrize("command", list(PANELS))
def test_no_description_is_squeezed(command: str) -> None:
    """Each option's description starts on its own line within the first 44 columns (35 left for it)."""
    lines = render(command).splitlines()
    for option in options_of(command):
        first_words = " ".join(option.help.split()[:2])
        row = next(line for line in lines if re.search(rf"{option.opts[0]}\b", line) and first_words in line)
        assert row.index(first_words) <= DESCRIPTION_BY, (option.opts[0], row)


def test_train_shows_each_setting_s_default_and_help_from_the_settings() -> None:
    from agentgym.trainers.settings import SECTIONS, setting_help

    defaults = {name: info.default for model in SECTIONS.values() for name, info in model.model_fields.items()}
    output = " ".join(render("train").replace("│", " ").split())
    expected = {"--steps": 40, "--model": "tiny", "--lr": 0.001, "--trainer": "grpo", "--group-size": 8,
                "--episodes-per-step": 32, "--max-tokens": 16, "--temperature": 1.0, "--out": "runs/train",
                "--seed": 0, "--api-key": "EMPTY", "--engine": "builtin"}
    for flag, shown in expected.items():
        name = flag.removeprefix("--").replace("-", "_")
        assert defaults[name] == shown  # the settings' own default, shown as it is
        assert f"[default: {shown}]" in output, flag
    assert "[default: no-lora]" in output
    assert setting_help("steps") in output and setting_help("trainer") in output
    assert "Continue from the newest checkpoint in --out." in output  # ``out`` became the flag


@pytest.mark.parametrize("command", every_command(), ids=lambda path: " ".join(path) or "agentgym")
def test_a_flag_shows_no_value_type(command: tuple[str, ...]) -> None:
    output = render(*command)
    assert "<bool>" not in output
    assert re.search(r"--help +Show this message and exit\.", output)


def test_the_command_list_names_every_trainer_on_unbroken_lines() -> None:
    from agentgym.cli.train_cmd import train_command
    from agentgym.trainers.registry import list_trainers

    summary = train_command.__doc__.split("\n\n")[0]
    assert "\n" not in summary  # typer keeps a docstring's line breaks: one line, or it breaks mid-sentence
    lines = render().splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("│ train "))
    entry = [lines[start]] + [line for line in lines[start + 1:start + 3] if line.startswith("│         ")]
    text = " ".join(" ".join(line.strip("│ ").split()) for line in entry)
    assert text == "train Train a model with grpo, ppo, dpo, sft, distill or rm, on an env or on rollout files."
    for spec in list_trainers():
        assert re.search(rf"\b{spec.name}\b", summary), spec.name

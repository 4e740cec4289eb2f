"""First contact (issue 41): a user's mistake ends in one clear line and a non-zero exit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.registry import env_argument_error

runner = CliRunner()
RANDOM = ["rollout", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "1", "--concurrency", "1"]


def _one_error_line(result) -> str:
    """The command failed with one ``error:`` line and no traceback; that line."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("value", ["banana", "[6]"])
def test_a_bad_dim_room_is_one_line(value: str) -> None:
    line = _one_error_line(runner.invoke(app, [*RANDOM, "-k", f"dim_room={value}"], terminal_width=400))
    assert line.startswith("error: dim_room must be a side (7) or [height, width] ([7, 8]), got ")


def test_an_unknown_env_argument_lists_the_accepted_ones() -> None:
    line = _one_error_line(runner.invoke(app, [*RANDOM, "-k", "dimroom=7"], terminal_width=400))
    assert line.startswith("error: Sokoban-LLM-v0 has no argument 'dimroom' (did you mean dim_room?); "
                           "it takes dim_room=(6, 6), num_boxes=1, max_turns=30")


def test_play_names_the_unknown_argument_too() -> None:
    line = _one_error_line(runner.invoke(app, ["play", "Sokoban-LLM-v0", "-k", "colour=red"], terminal_width=400))
    assert "Sokoban-LLM-v0 has no argument 'colour'; it takes dim_room=(6, 6)" in line


class PickyEnv:
    """An env whose constructor raises a plain ValueError (not our ConfigError)."""

    def __init__(self, size: int = 3) -> None:
        raise ValueError(f"size {size} is not a size I like")


def test_an_env_s_own_value_error_becomes_a_config_error() -> None:
    agentgym.register("Picky-LLM-v0", f"{__name__}:PickyEnv", family="test", description="Refuses.")
    error = env_argument_error("Picky-LLM-v0", {"size": 4}, ValueError("size 4 is not a size I like"))
    assert isinstance(error, ConfigError)
    assert str(error) == "Picky-LLM-v0 cannot use size=4: size 4 is not a size I like; it takes size=3."
    line = _one_error_line(runner.invoke(app, ["play", "Picky-LLM-v0", "-k", "size=4"], terminal_width=400))
    assert line == "error: Picky-LLM-v0 cannot use size=4: size 4 is not a size I like; it takes size=3."


# -- one column order for the rollout and eval tables -------------------------------------------

def test_rollout_and_eval_tables_share_one_column_order() -> None:
    from agentgym.cli.eval_cmd import result_table, summarize
    from agentgym.cli.rollout_cmd import _summary

    order = ["episodes", "success rate", "mean reward", "mean turns", "invalid actions", "failed"]
    result = summarize([], env_id="Sokoban-LLM-v0", env_kwargs={}, policy="random", seed_offset=0, temperature=0.0)
    assert [column.header for column in _summary("Sokoban-LLM-v0", "random", []).columns] == order
    assert [column.header for column in result_table(result).columns] == order


# -- agentgym train's closing line ----------------------------------------------------------------

def _closing_line(metrics: list[dict[str, float]], capsys: pytest.CaptureFixture[str], tmp_path,
                  trajectories: str | None = None) -> str:
    from types import SimpleNamespace

    from agentgym.cli.train_cmd import _print_result

    config = SimpleNamespace(run=SimpleNamespace(out=str(tmp_path), trainer="grpo"),
                             rollout=SimpleNamespace(env_id=None, trajectories=trajectories))
    _print_result(config, SimpleNamespace(metrics=metrics, out=str(tmp_path), final_model=None))
    return " ".join(capsys.readouterr().out.split()).split(" Metrics:")[0]


def test_train_names_the_success_rate_first_and_explains_a_falling_reward(capsys, tmp_path) -> None:
    line = _closing_line([{"success": 0.47, "reward": 0.503}, {"success": 0.91, "reward": 0.453}], capsys, tmp_path)
    assert line == ("Success rate 47% -> 91% (first step -> last); mean reward 0.503 -> 0.453 (the env's own "
                    "reward, which success need not raise: Bandit's is a random payout).")


def test_train_s_closing_line_without_the_remark_when_reward_follows_success(capsys, tmp_path) -> None:
    line = _closing_line([{"success": 0.2, "reward": 0.1}, {"success": 0.6, "reward": 0.5}], capsys, tmp_path)
    assert line == "Success rate 20% -> 60% (first step -> last); mean reward 0.100 -> 0.500."


def test_train_on_recorded_rows_says_the_success_rate_is_the_files(capsys, tmp_path) -> None:
    line = _closing_line([{"success": 0.5, "reward": 0.6}, {"success": 0.5, "reward": 0.4}], capsys, tmp_path,
                         trajectories="rows.parquet")
    assert line.startswith("Success rate 50% -> 50% (first step -> last, of the recorded episodes read);")


# -- a dead --base-url, a run whose every episode failed -------------------------------------------

def _dead_url() -> str:
    from agentgym.serve.launch import free_port

    return f"http://127.0.0.1:{free_port()}/v1"  # loopback, and nothing listens there


@pytest.mark.parametrize("command", ["rollout", "eval"])
def test_a_dead_base_url_fails_before_playing(command: str) -> None:
    url = _dead_url()
    result = runner.invoke(app, [command, "--env", "Bandit-LLM-v0", "--base-url", url, "--model", "x",
                                 "--episodes", "4"], terminal_width=400)
    assert result.exit_code == 1
    assert _one_error_line(result) == (f"error: nothing answers at {url} (connection refused): start the server "
                                       "(e.g. vllm serve MODEL) or fix --base-url.")
    assert "episodes" not in result.output  # no table: nothing was played


def test_every_episode_failing_exits_non_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.rollout.policies import RandomPolicy

    def broken(self, *args, **kwargs):
        raise OSError("the policy is down")

    monkeypatch.setattr(RandomPolicy, "act", broken)
    result = runner.invoke(app, [*RANDOM, "--episodes", "3", "--show", "0"], terminal_width=400)
    assert result.exit_code == 1
    assert "failed" in result.output  # the table is still shown
    assert _one_error_line(result) == ("error: all 3 episodes stopped with an error (3 x OSError: the policy is "
                                       "down); fix that and rerun the same command.")


def test_eval_plays_a_model_behind_a_base_url(tiny_model: str) -> None:
    from agentgym.serve.stub import StubServer

    with StubServer(delay=0.0) as stub:
        result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--base-url", stub.base_url, "--model", "tiny",
                                     "--episodes", "2", "--max-turns", "2"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert f"warning: {stub.base_url} lists 'stub', not 'tiny'" in result.output
    assert "seeds 100000..100001" in result.output


# -- Ctrl-C and --resume ------------------------------------------------------------------------------

@pytest.fixture
def ctrl_c_reaches_us() -> Iterator[None]:
    """SIGINT as a terminal's Ctrl-C delivers it: a shell starts a background job (`pytest &`) with
    SIGINT ignored, and then asyncio leaves it ignored too."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_after(episodes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Press Ctrl-C (SIGINT to this process) once ``episodes`` episodes have finished."""
    import os
    import signal

    from agentgym.rollout.manager import EnvManager

    original = EnvManager.__init__

    def init(self, *args, on_episode=None, **kwargs):
        finished = 0

        def counting(rows):
            nonlocal finished
            on_episode(rows)
            finished += 1
            if finished == episodes:
                os.kill(os.getpid(), signal.SIGINT)  # asyncio.run cancels the run, then raises KeyboardInterrupt

        original(self, *args, on_episode=counting, **kwargs)

    monkeypatch.setattr(EnvManager, "__init__", init)


@pytest.mark.usefixtures("ctrl_c_reaches_us")
def test_ctrl_c_says_what_was_saved_and_resume_what_was_there(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    out = tmp_path / "x.parquet"
    args = [*RANDOM, "--episodes", "8", "--show", "0", "--out", str(out)]
    _interrupt_after(3, monkeypatch)
    result = runner.invoke(app, args, terminal_width=400)
    assert result.exit_code == 130
    output = " ".join(result.output.split())
    saved = re.search(rf"(\d)/8 episodes saved to {re.escape(str(out))}; rerun the same command with --resume to "
                      "play the rest.", output)
    assert saved is not None and 3 <= int(saved[1]) < 8, output  # the episode playing when it came may finish
    monkeypatch.undo()
    again = runner.invoke(app, [*args, "--resume"], terminal_width=400)
    assert again.exit_code == 0, again.output
    held = int(saved[1])
    assert f"{out} holds {held} of 8 episodes; playing the other {8 - held}." in " ".join(again.output.split())


@pytest.mark.usefixtures("ctrl_c_reaches_us")
def test_ctrl_c_without_out_says_nothing_was_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _interrupt_after(2, monkeypatch)
    result = runner.invoke(app, [*RANDOM, "--episodes", "8", "--show", "0"], terminal_width=400)
    assert result.exit_code == 130
    assert ("/8 episodes played, none saved (--out FILE keeps them as they finish, and --resume then plays the "
            "rest).") in " ".join(result.output.split())


# -- install hints name our setup script, agentgym list names each env's extra -------------------

def test_the_install_hint_names_the_setup_script() -> None:
    from agentgym.errors import MissingDependencyError

    assert MissingDependencyError.install_hint("math", "math-verify") == (
        "scripts/setup.sh math (from the agentgym repository root; or: pip install math-verify)")
    assert MissingDependencyError.install_hint("web") == "scripts/setup.sh web (from the agentgym repository root)"


def test_no_message_sends_a_user_to_the_unrelated_pypi_agentgym() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    hint = "pip install " + "'agentgym["  # split, so this file is not an offender
    offenders = [str(path.relative_to(root)) for folder in ("agentgym", "envs", "sandbox", "trainers", "tests")
                 for path in (root / folder).rglob("*.py")
                 if hint in path.read_text(encoding="utf-8").replace(f"never ``{hint}math]'``", "")]
    assert offenders == [], offenders  # (errors.py's docstring says never to write it)


def test_list_names_the_extra_each_env_needs() -> None:
    result = runner.invoke(app, ["list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    needs = {cells[0]: cells[-1] for line in result.output.splitlines()
             if len(cells := [cell.strip() for cell in line.split("│")[1:-1]]) == 4 and cells[0].endswith("-v0")}
    assert needs["Math-LLM-v0"] == "math extra" and needs["ReasoningGym-LLM-v0"] == "reasoning extra"
    assert needs["SearchQA-LLM-v0"] == "retrieval extra" and needs["WebShop-LLM-v0"] == "web extra"
    assert needs["Code-LLM-v0"] == "-" and needs["Sokoban-LLM-v0"] == "-"  # Code falls back to the local sandbox
    assert "An env's extra installs with scripts/setup.sh EXTRA" in result.output


def test_docs_envs_says_what_list_shows() -> None:
    """docs/envs.md's catalogue names each env's extra; `agentgym list` shows the same one, and "-" for the
    envs the doc says run on the base install (the games, and Code)."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "envs.md").read_text(encoding="utf-8")
    assert "shows `-` for an env that runs on the base install: the games, and Code" in " ".join(doc.split())
    result = runner.invoke(app, ["list"], terminal_width=200)
    needs = {cells[0]: cells[-1] for line in result.output.splitlines()
             if len(cells := [cell.strip() for cell in line.split("│")[1:-1]]) == 4 and cells[0].endswith("-v0")}
    rows = [line.split(" | ") for line in doc.splitlines() if line.startswith("| `") and "-LLM-v0` |" in line]
    for cells in rows:
        env_id, family, extra = cells[0].strip("| `"), cells[1], cells[-1]
        base_install = family == "games" or env_id == "Code-LLM-v0"
        expected = "-" if base_install else f"{re.findall(r'`([^`]+)`', extra)[0]} extra"
        assert needs[env_id] == expected, (env_id, extra)
    built_in = {info.id for info in agentgym.list_envs() if info.family != "test"}  # not the suite's fake envs
    assert {cells[0].strip("| `") for cells in rows} == built_in  # the catalogue has every env


# -- --version (the help screens: test_help_screens.py) --------------------------------------------

def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"agentgym {agentgym.__version__}\n"


# -- mistakes found before anything starts -----------------------------------------------------------

@pytest.mark.parametrize("command", [["serve", "--model", "/nonexistent/model"],
                                     ["train", "--env", "Bandit-LLM-v0", "--model", "/nonexistent/model"]])
def test_a_missing_model_is_refused_before_the_banner(command: list[str], tmp_path) -> None:
    result = runner.invoke(app, [*command, *(["--out", str(tmp_path / "run")] if command[0] == "train" else [])],
                           terminal_width=400)
    assert _one_error_line(result).startswith("error: --model '/nonexistent/model' does not exist.")
    assert "Serving" not in result.output and "Training" not in result.output
    assert not (tmp_path / "run").exists()


def test_a_used_run_folder_is_refused_before_the_banner(tmp_path) -> None:
    (tmp_path / "run" / "final").mkdir(parents=True)
    result = runner.invoke(app, ["train", "--env", "Bandit-LLM-v0", "--out", str(tmp_path / "run")],
                           terminal_width=400)
    assert "already holds a training run" in _one_error_line(result)
    assert "Training" not in result.output


def test_a_server_stopped_by_ctrl_c_while_starting_is_an_interrupt_not_a_fault() -> None:
    import signal
    import subprocess

    from agentgym.serve.launch import free_port, wait_for_health

    # As the terminal's Ctrl-C reaches the server too (SIGINT not ignored, whatever started pytest).
    child = subprocess.Popen(["sh", "-c", "kill -INT $$"],
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child.wait()
    with pytest.raises(KeyboardInterrupt):
        wait_for_health(f"http://127.0.0.1:{free_port()}/health", 10.0, child)


# -- what eval and rollout wrote, what view --tokens' colours mean (issue 50) ----------------------------

@pytest.mark.parametrize(("command", "flag"), [("rollout", "--out"), ("eval", "--episodes-out")])
def test_rollout_and_eval_say_where_the_rows_went(command: str, flag: str, tmp_path) -> None:
    from agentgym.rollout.storage import read_rows

    out = tmp_path / "rollouts" / f"{command}.parquet"  # the folder is made
    result = runner.invoke(app, [command, "--env", "Bandit-LLM-v0", "--policy", "random", "--episodes", "3",
                                 flag, str(out), *(["--show", "0"] if command == "rollout" else [])],
                           terminal_width=400)
    assert result.exit_code == 0, result.output
    assert f"3 episodes (3 rows) written to {out}; agentgym view {out} replays them." in result.output.splitlines()
    assert len(read_rows(out)) == 3


def test_view_tokens_prints_a_legend_of_its_colours(tmp_path, tiny_model: str) -> None:
    from rich.text import Text

    from agentgym.cli.view_cmd import TOKEN_STYLES, _token_view, token_legend
    from agentgym.rollout.storage import read_rows

    out = tmp_path / "rows.parquet"
    recorded = runner.invoke(app, [*RANDOM, "--env", "Bandit-LLM-v0", "--out", str(out), "--show", "0"])
    assert recorded.exit_code == 0, recorded.output
    result = runner.invoke(app, ["view", str(out), "--tokens"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).startswith(
        "tokens: green: sampled and learned; yellow: played, not learned (e.g. DAgger's expert moves); dim: the "
        "prompt and the env's replies ")  # before the first episode
    legend = {span.style for span in token_legend().spans}
    assert legend == {style for style, _ in TOKEN_STYLES.values()}
    shown: Text = _token_view(read_rows(out)[0], lambda ids: "x" * len(ids))
    assert {span.style for span in shown.spans} <= legend  # every colour the view uses is explained

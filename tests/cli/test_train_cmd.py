"""``agentgym train`` and ``agentgym report`` from the command line (offline runs: no server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.trainers.settings import TrainConfig
from agentgym.trainers.loop.metrics import read_jsonl

runner = CliRunner()


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory: pytest.TempPathFactory, tiny_model: str) -> Path:
    """Random-policy Bandit episodes recorded in the tiny model's tokens."""
    path = tmp_path_factory.mktemp("rows") / "bandit.parquet"
    result = runner.invoke(app, ["rollout", "--env", "Bandit-LLM-v0", "--policy", "random", "--episodes", "16",
                                 "--group-size", "4", "--out", str(path), "--show", "0"])
    assert result.exit_code == 0, result.output
    return path


def _train(rows_file: Path, out: Path, *extra: str) -> object:
    return runner.invoke(app, ["train", "--trajectories", str(rows_file), "--steps", "2", "--group-size", "4",
                               "--episodes-per-step", "8", "--out", str(out), *extra], terminal_width=200)


def test_train_offline_then_report(rows_file: Path, tmp_path: Path) -> None:
    result = _train(rows_file, tmp_path / "run", "-s", "pack_sequences=true", "-s", "lr=5e-4")
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())  # the console wraps long lines
    assert "step 2/2" in output and "Success rate " in output
    assert f"agentgym report {tmp_path / 'run'}" in output
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == 2
    config = TrainConfig.from_yaml(tmp_path / "run" / "config.yaml")
    assert config.native.pack_sequences is True and config.optim.lr == 5e-4
    assert config.rollout.trajectories == str(rows_file)
    report = runner.invoke(app, ["report", str(tmp_path / "run")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "run" / "report.html").read_text().count("<svg") >= 6
    left = {path.name for path in (tmp_path / "run").iterdir()}
    assert left <= run_folder_entries(), left - run_folder_entries()  # docs/training.md names each


def run_folder_entries() -> set[str]:
    """The top-level names docs/training.md's "The run folder" table lists."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    section = doc.split("## The run folder", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name.split("/")[0] for cell in cells for name in re.findall(r"`([^`]+)`", cell)}


def test_the_run_folder_section_documents_the_weights_sync_folder() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| `sync/` |"))
    assert "the weights pushed to the server after each step" in row
    assert {"sync", "config.yaml", "metrics.jsonl", "checkpoints", "final", "reference"} <= run_folder_entries()


def test_flags_override_the_config_file(rows_file: Path, tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(f"trajectories: {rows_file}\nsteps: 5\nlr: 1e-4\nseed: 9\n")
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "run.yaml"), "--steps", "1", "--group-size", "4",
                                 "--episodes-per-step", "4", "--turn-budget", "5", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    config = TrainConfig.from_yaml(tmp_path / "run" / "config.yaml")
    assert (config.run.steps, config.optim.lr, config.run.seed, config.rollout.turn_budget) == (1, 1e-4, 9, 5)


@pytest.mark.parametrize(("args", "message"), [
    (["train", "--steps", "2"], "Give an env to train on (--env ENV) or a rollout file"),
    (["train", "--env", "Bandit-LLM-v0", "-s", "stepz=3"], "Unknown training setting 'stepz'. Did you mean 'steps'?"),
    (["train", "--env", "Bandit-LLM-v0", "-s", "lr"], "--set takes KEY=VALUE, got 'lr'."),
    (["train", "--env", "Bandit-LLM-v0", "--backend", "jax"], "Trainer 'grpo' has no backend 'jax'; it runs on fsdp, trl."),
    (["train", "--env", "Bandit-LLM-vO"], "Bandit-LLM-v0"),  # did you mean
])
def test_bad_flags_say_what_to_do(args: list[str], message: str, tmp_path: Path) -> None:
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "run")], terminal_width=300)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_report_of_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)], terminal_width=300)
    assert result.exit_code == 2 and "has no metrics.jsonl" in result.output


# -- a bad --trajectories file: one line, whichever trainer reads it (issue 50) ---------------------

HINT = ("a rollout file is the Parquet file `agentgym rollout --env ENV --out FILE` (or `agentgym eval "
        "--episodes-out FILE`) writes.")


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Fails the test if a run gets as far as starting the built-in server, any process, or building the
    tiny model (into an empty cache, as on a new machine); the list names what started."""
    import subprocess

    import agentgym.models.tiny
    from agentgym.serve.launch import BuiltinServer

    started: list[str] = []

    def refuse(what: str):
        def started_it(*args, **kwargs):
            started.append(what)
            raise AssertionError(f"{what} was started: a bad name was not caught up front")
        return started_it

    monkeypatch.setattr(BuiltinServer, "__init__", refuse("the built-in server"))
    monkeypatch.setattr(subprocess, "Popen", refuse("a process"))
    monkeypatch.setattr(agentgym.models.tiny, "build_tiny_model", refuse("the tiny model's build"))
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path_factory.mktemp("empty-cache")))
    return started


def _error_line(result) -> str:
    """The run failed (exit 2) with one ``error:`` line, no traceback; that line."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize("trainer", ["grpo", "ppo", "dpo", "sft", "distill"])
def test_a_text_file_named_parquet_is_one_line_for_every_trainer(trainer: str, tmp_path: Path,
                                                                nothing_starts: list[str]) -> None:
    path = tmp_path / "rows.parquet"
    path.write_text("episode_id,reward\ne0,1.0\n")
    teacher = ["-s", "teacher=tiny"] if trainer == "distill" else []
    result = runner.invoke(app, ["train", "--trainer", trainer, "--trajectories", str(path), *teacher,
                                 "--out", str(tmp_path / "run")], terminal_width=1000)
    assert _error_line(result) == f"error: {path} holds text (starting 'episode_id,reward'), not Parquet; {HINT}"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("trainer", "kind"), [("grpo", "other columns"), ("sft", "other columns"), ("grpo", "text")])
def test_a_file_the_trainer_reads_as_rows_is_one_line(trainer: str, kind: str, tmp_path: Path, tiny_model: str,
                                                      nothing_starts: list[str]) -> None:
    """Read where the trainer reads its rows (agentgym.rollout.storage.read_rows), after the model is
    loaded (the up-front check reads only whether a .parquet file is Parquet): the issue's two cases."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "text":
        path = tmp_path / "rows.txt"
        path.write_text("hello\n")
        what = "holds text (starting 'hello'), not Parquet"
    else:
        path = tmp_path / "rows.parquet"
        pq.write_table(pa.table({"prompt": ["a"], "answer": ["b"]}), path)
        what = ("is a Parquet file but not a rollout file: it lacks the columns episode_id, group_id, "
                "index_in_group and 20 more; its columns are ['answer', 'prompt']")
    result = runner.invoke(app, ["train", "--trainer", trainer, "--trajectories", str(path), "--steps", "1",
                                 "--model", tiny_model, "--out", str(tmp_path / "run")], terminal_width=1000)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {path} {what}; {HINT}"] and "Traceback" not in result.output
    assert not (tmp_path / "run" / "config.yaml").exists()


# -- every name and setting checked before anything starts (issue 50) --------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["--env", "Bandit-LLM-vO"], "error: No environment registered as 'Bandit-LLM-vO'. Did you mean 'Bandit-LLM-v0'"),
    (["--env", "Bandit-LLM-v0", "--trainer", "grop"], "error: No trainer registered as 'grop'. Did you mean 'grpo'?"),
    (["--env", "Bandit-LLM-v0", "--backend", "jax"], "error: Trainer 'grpo' has no backend 'jax'; it runs on fsdp, trl."),
    (["--env", "Bandit-LLM-v0", "--trainer", "sft", "--backend", "tlr"], "error: Trainer 'sft' has no backend 'tlr'"),
    (["--env", "Bandit-LLM-v0", "--model", "./no-such-model"], "error: --model './no-such-model' does not exist."),
    (["--env", "Bandit-LLM-v0", "--trainer", "distill", "-s", "teacher=./no-such-teacher"],
     "error: -s teacher './no-such-teacher' does not exist."),
    (["--env", "Bandit-LLM-v0", "--model", "tiny-100x2"], "error: 'tiny-100x2': the hidden size must be a multiple"),
    (["--env", "Bandit-LLM-v0", "-s", "stepz=3"], "error: Unknown training setting 'stepz'. Did you mean 'steps'?"),
    (["--env", "Bandit-LLM-v0", "--trainer", "sft"], "error: --trainer sft learns from a rollout file: pass "),
    (["--env", "Bandit-LLM-v0", "--trainer", "distill"], "error: --trainer distill needs a teacher: -s teacher="),
    (["--env", "Bandit-LLM-v0", "-s", "teacher=tiny"],
     "error: distill.teacher is set, but trainer 'grpo' on backend 'fsdp' does not read the distill section"),
    (["--env", "Bandit-LLM-v0", "-s", "lr=fast"], "error: Setting optim.lr: Input should be a valid number"),
    (["--env", "Bandit-LLM-v0", "-k", "arms=3"], "error: Bandit-LLM-v0 has no argument 'arms' (did you mean arm_names?)"),
    (["--env", "Sokoban-LLM-v0", "-k", "dim_room=banana"], "error: dim_room must be a side (7) or [height, width]"),
    (["--trajectories", "no-such-rows.parquet"], "error: --trajectories: no such file: no-such-rows.parquet."),
])
def test_a_misspelt_name_fails_before_anything_starts(args: list[str], message: str, tmp_path: Path,
                                                      nothing_starts: list[str]) -> None:
    result = runner.invoke(app, ["train", *args, "--out", str(tmp_path / "run")], terminal_width=1000)
    assert _error_line(result).startswith(message)
    assert nothing_starts == [] and not (tmp_path / "run").exists()


# -- a resumed run says where it goes on, and its closing line covers the whole run (issue 50) -------

@pytest.fixture
def ctrl_c_at_call(monkeypatch: pytest.MonkeyPatch):
    """``ctrl_c_at_call(n)``: Ctrl-C arrives as the trainer's ``n``-th step (from 1) begins to learn."""
    from agentgym.trainers.registry import learner_class

    grpo = learner_class("grpo")
    original = grpo.train_step

    def arm(n: int) -> None:
        calls = []

        def train_step(self, rows):
            calls.append(1)
            if len(calls) == n:
                raise KeyboardInterrupt
            return original(self, rows)

        monkeypatch.setattr(grpo, "train_step", train_step)

    yield arm
    monkeypatch.undo()


def test_a_resumed_run_says_where_it_goes_on_and_ends_with_the_whole_run_s_success(
        rows_file: Path, tmp_path: Path, ctrl_c_at_call) -> None:
    out = tmp_path / "run"
    ctrl_c_at_call(2)  # step 1 learned; Ctrl-C as step 2 began: a checkpoint after step 1
    stopped = _train(rows_file, out, "--steps", "3")
    assert stopped.exit_code == 2 and "Continue the run with the same flags and --resume." in stopped.output
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1]
    first_step = read_jsonl(out / "metrics.jsonl")[0]["success"]
    ctrl_c_at_call(0)  # no more Ctrl-C
    resumed = _train(rows_file, out, "--steps", "3", "--resume")
    assert resumed.exit_code == 0, resumed.output
    output = " ".join(resumed.output.split())
    unbroken = "".join(output.split())  # the console may break a long path anywhere
    assert f"Resumedfrom{out / 'checkpoints' / 'step-000001'}afterstep1:continuingfromstep2of3." in unbroken
    assert "step 1/3" not in output and "step 2/3" in output
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3] and records[0]["success"] == first_step
    # Steps 1 and 3 read the same two groups of the 16 episodes, step 2 the other two (8 episodes a step).
    # The closing line starts at step 1, run before the resume, not at step 2, the first one run here.
    first, second, last = (records[i]["reward"] for i in range(3))
    assert second != first == last
    assert (f"Success rate {first_step:.0%} -> {records[2]['success']:.0%} (first step -> last, of the recorded "
            f"episodes read); mean reward {first:.3f} -> {last:.3f}.") in output


def test_a_run_stopped_before_its_first_checkpoint_says_it_starts_again(
        rows_file: Path, tmp_path: Path, ctrl_c_at_call) -> None:
    out = tmp_path / "run"
    ctrl_c_at_call(1)  # Ctrl-C as step 1 began: nothing to save yet
    stopped = _train(rows_file, out, "--steps", "2")
    assert stopped.exit_code == 2 and not (out / "checkpoints").exists()
    ctrl_c_at_call(0)
    resumed = _train(rows_file, out, "--steps", "2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert (f"--resume:{out}holdsnocheckpointyet(thefirstissavedafterstep2,orwhenCtrl-Cstopsarunbetween"
            "steps):startingfromstep1." in "".join(resumed.output.split()))  # a long path may break anywhere
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]

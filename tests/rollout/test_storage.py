from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import Result
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.rollout import storage
from agentgym.rollout.rows import ARROW_SCHEMA, Message, TrajectoryRow, TurnSpan, observation_hash
from agentgym.rollout.storage import RolloutWriter, done_episodes, load_rollouts, read_rows


def row(group: int, index: int) -> TrajectoryRow:
    return TrajectoryRow(
        episode_id=f"e{group}-{index}", group_id=group, index_in_group=index, env_id="Sokoban-LLM-v0",
        seed=group, prompt_ids=[1, 2], completion_ids=[3, 4, 5], completion_mask=[1, 1, 0],
        logprobs=[-0.5, -0.25, 0.0], reward=1.5, turn_rewards=[0.5, 1.0], success=True, num_turns=2,
        terminated=True, stop_reason="terminated", messages=[Message(role="user", content="hi")],
        turns=[TurnSpan(turn=0, start=0, end=2, observation_hash=observation_hash("hi"))], server_logprobs=True,
    )


def test_schema_has_every_row_field() -> None:
    assert ARROW_SCHEMA.names == list(TrajectoryRow.model_fields)


def test_rows_round_trip_through_parquet_and_datasets(tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    with RolloutWriter(out) as writer:
        writer.add([row(0, 0), row(0, 1)])
    assert read_rows(out) == [row(0, 0), row(0, 1)]
    dataset = load_rollouts(out)
    assert dataset.num_rows == 2
    import datasets

    loaded = datasets.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    assert loaded["completion_ids"] == [[3, 4, 5], [3, 4, 5]] and loaded["episode_id"] == ["e0-0", "e0-1"]
    assert dataset[0]["completion_mask"] == [1, 1, 0] and dataset[0]["messages"][0]["content"] == "hi"
    assert loaded["turns"][0] == [{"turn": 0, "start": 0, "end": 2, "observation_hash": observation_hash("hi")}]
    assert loaded["server_logprobs"] == [True, True]
    assert not (tmp_path / "rollouts.parquet.parts").exists()


def test_finished_episodes_survive_a_crash_and_resume_skips_them(tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    writer = RolloutWriter(out, flush_seconds=0)
    writer.add([row(0, 0)])
    writer.add([row(1, 0)])
    # The process dies here: close() never runs, no `out` exists, the parts do.
    assert not out.exists()
    assert done_episodes(out) == {(0, 0), (1, 0)}
    with RolloutWriter(out, resume=True) as resumed:
        resumed.add([row(2, 0)])
    assert sorted(r.key for r in read_rows(out)) == [(0, 0), (1, 0), (2, 0)]


def test_an_existing_file_is_not_overwritten_without_resume(tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    RolloutWriter(out).close()
    with pytest.raises(ConfigError, match="already exists: pass --resume"):
        RolloutWriter(out)


def test_rows_wait_in_memory_at_most_flush_seconds(tmp_path: Path) -> None:
    writer = RolloutWriter(tmp_path / "r.parquet", flush_seconds=3600)
    writer.add([row(0, 0)])
    assert writer.written == 0
    writer.flush()
    assert writer.written == 1 and done_episodes(tmp_path / "r.parquet") == {(0, 0)}


class Killed(BaseException):
    """The process dying at an instruction: nothing after it runs, no handler catches it."""


@contextlib.contextmanager
def killed_at(step: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Kill the writer at its ``step``-th file-system change (0 first); yields the changes made.

    A killed ``write_table`` leaves a torn file behind, as a real kill mid-write would.
    """
    done: list[str] = []
    real = {"replace": os.replace, "write_table": pq.write_table, "unlink": Path.unlink, "rmdir": Path.rmdir,
            "mkdir": Path.mkdir}

    def wrap(name: str) -> Callable[..., object]:
        def change(*args: object, **kwargs: object) -> object:
            if len(done) == step:
                if name == "write_table":
                    Path(str(args[1])).write_bytes(b"PAR1 torn")
                raise Killed(f"{name} {args[1:] if name != 'unlink' else args[0]}")
            done.append(name)
            return real[name](*args, **kwargs)
        return change

    with monkeypatch.context() as patch:
        patch.setattr(storage.os, "replace", wrap("replace"))
        patch.setattr(storage.pq, "write_table", wrap("write_table"))
        for name in ("unlink", "rmdir", "mkdir"):
            patch.setattr(Path, name, wrap(name))
        yield done


def close_killed_at(writer: RolloutWriter, step: int, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Close ``writer``, killed at its ``step``-th change; True if the close ran to its end."""
    with killed_at(step, monkeypatch):
        try:
            writer.close()
        except Killed:
            return False
    return True


def resume_and_finish(out: Path, everything: list[TrajectoryRow]) -> None:
    """What ``--resume`` does: replay the episodes the files lack, then close."""
    done = done_episodes(out)
    with RolloutWriter(out, resume=True, flush_seconds=0) as writer:
        writer.add([r for r in everything if r.key not in done])


def test_a_kill_at_any_step_of_the_final_merge_loses_and_doubles_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, parts, buffered = [row(0, 0), row(0, 1)], [row(1, 0), row(1, 1), row(2, 0)], [row(3, 0)]
    everything = first + parts + buffered
    step, finished = 0, False
    while not finished:
        out = tmp_path / f"kill-{step}" / "rollouts.parquet"
        with RolloutWriter(out) as writer:  # an earlier session's merged file
            writer.add(first)
        writer = RolloutWriter(out, resume=True, flush_seconds=0)
        writer.add(parts)  # written as parts at once
        writer.flush_seconds = 3600
        writer.add(buffered)  # still in memory: close() flushes it first
        finished = close_killed_at(writer, step, monkeypatch)
        # Right after the kill: every row once, but the buffered one only if its part was renamed.
        seen = [r.key for r in read_rows(out)]
        assert len(seen) == len(set(seen)), f"kill at step {step}: a row counted twice"
        assert set(seen) >= {r.key for r in first + parts}, f"kill at step {step}: a row lost"
        resume_and_finish(out, everything)
        assert read_rows(out) == everything, f"kill at step {step}"
        assert pq.read_table(out).num_rows == len(everything) and not storage._parts_dir(out).exists()
        step += 1
    assert step > 6  # flush (write, rename), merge (write, rename), the unlinks, the rmdir


def test_a_resumed_merge_killed_again_at_any_step_still_ends_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two kills in a row: the first just after the merged file replaced ``out`` (the moment
    that used to double every row), the second at every step of the resumed run's merge."""
    everything = [row(0, 0), row(1, 0), row(2, 0), row(3, 0)]
    step, finished = 0, False
    while not finished:
        out = tmp_path / f"twice-{step}" / "rollouts.parquet"
        writer = RolloutWriter(out, flush_seconds=0)
        for episode in everything[:2]:
            writer.add([episode])  # a part each
        first_unlink = 2  # close: write the merged file, rename it over `out`, delete the parts
        assert not close_killed_at(writer, first_unlink, monkeypatch)
        assert out.exists() and len(storage._all_parts(out)) == 2  # the rows are in both
        resumed = RolloutWriter(out, resume=True, flush_seconds=0)
        assert done_episodes(out) == {(0, 0), (1, 0)}
        resumed.add(everything[2:])
        finished = close_killed_at(resumed, step, monkeypatch)
        resume_and_finish(out, everything)
        assert read_rows(out) == everything, f"second kill at step {step}"
        step += 1


def test_kill_9_between_the_rename_and_the_deletes_then_resume(tmp_path: Path) -> None:
    """The reported case, with a real SIGKILL: 64 episodes must stay 64 rows."""
    out = tmp_path / "rollouts.parquet"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from agentgym.rollout.storage import RolloutWriter
        from test_storage import row
        writer = RolloutWriter({str(out)!r}, flush_seconds=0)
        for group in range(8):
            writer.add([row(group, index) for index in range(8)])
        Path.unlink = lambda self, *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        writer.close()
    """)
    tests = str(Path(__file__).parent)
    result = subprocess.run([sys.executable, "-c", script], cwd=tests, check=False, timeout=120,
                            env={**os.environ, "PYTHONPATH": tests})
    assert result.returncode == -signal.SIGKILL and out.exists()
    assert len(read_rows(out)) == 64 and len(done_episodes(out)) == 64
    resume_and_finish(out, [row(group, index) for group in range(8) for index in range(8)])
    assert pq.read_table(out).num_rows == 64 and len({r.key for r in read_rows(out)}) == 64


def test_part_names_are_never_reused_after_a_kill_mid_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A part the merged file absorbed must not be overwritten by a new one of the same name."""
    out = tmp_path / "rollouts.parquet"
    writer = RolloutWriter(out, flush_seconds=0)
    for group in range(3):
        writer.add([row(group, 0)])
    assert not close_killed_at(writer, 3, monkeypatch)  # write, rename, delete part 0, killed
    names = sorted(p.name for p in storage._parts_dir(out).iterdir())
    assert names == ["part-000001.parquet", "part-000002.parquet"]
    with RolloutWriter(out, resume=True, flush_seconds=0) as resumed:
        resumed.add([row(3, 0)])
        assert max(p.name for p in storage._parts_dir(out).iterdir()) == "part-000003.parquet"
    assert [r.key for r in read_rows(out)] == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_resume_refuses_a_file_of_another_run_and_names_the_difference(tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    run = {"--env": "Sokoban-LLM-v0", "--group-size": 8, "seeds": [3, 4]}
    writer = RolloutWriter(out, flush_seconds=0, run=run)
    writer.add([row(0, 0)])  # crashed: only a part holds the run
    with pytest.raises(ConfigError, match="holds Sokoban-LLM-v0 episodes; --env is FrozenLake-LLM-v0: use "
                                          "another --out or the same --env"):
        RolloutWriter(out, resume=True, run={**run, "--env": "FrozenLake-LLM-v0"})
    writer.close()
    with pytest.raises(ConfigError, match="played with --group-size 8; this run has --group-size 4"):
        RolloutWriter(out, resume=True, run={**run, "--group-size": 4})
    with pytest.raises(ConfigError, match=r"seeds \[3, 4\]; this run has seeds \[3, 5\]"):
        RolloutWriter(out, resume=True, run={**run, "seeds": [3, 5]})
    RolloutWriter(out, resume=True, run={**run, "seeds": [3, 4, 9]}).close()  # more groups: allowed
    assert storage._metadata(out)["run"] == run


def test_a_file_written_before_runs_were_recorded_is_checked_on_its_env(tmp_path: Path) -> None:
    out = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pylist([row(0, 0).to_record()], schema=ARROW_SCHEMA), out)
    with pytest.raises(ConfigError, match="holds Sokoban-LLM-v0 episodes; --env is FrozenLake-LLM-v0"):
        RolloutWriter(out, resume=True, run={"--env": "FrozenLake-LLM-v0", "--group-size": 1})
    RolloutWriter(out, resume=True, run={"--env": "Sokoban-LLM-v0", "--group-size": 1}).close()


def rollout_cli(out: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["rollout", "--policy", "random", "--out", str(out), "--show", "0", *args],
                              terminal_width=300)


def test_the_cli_resumes_only_the_same_run(tmp_path: Path) -> None:
    out = tmp_path / "sokoban.parquet"
    sokoban = ["--env", "Sokoban-LLM-v0", "--max-turns", "3"]
    assert rollout_cli(out, *sokoban, "--episodes", "8").exit_code == 0
    refused = rollout_cli(out, "--env", "FrozenLake-LLM-v0", "--max-turns", "3", "--episodes", "9", "--resume")
    assert refused.exit_code == 2
    assert (f"error: {out} holds Sokoban-LLM-v0 episodes; --env is FrozenLake-LLM-v0: use another --out or "
            "the same --env.") in refused.output
    refused = rollout_cli(out, *sokoban, "--episodes", "10", "--group-size", "2", "--resume")
    assert refused.exit_code == 2 and "played with --group-size 1; this run has --group-size 2" in refused.output
    refused = rollout_cli(out, "--env", "Sokoban-LLM-v0", "--episodes", "10", "--resume")
    assert refused.exit_code == 2 and "played with --max-turns 3; this run has --max-turns (not set)" in refused.output
    assert [r.env_id for r in read_rows(out)] == ["Sokoban-LLM-v0"] * 8  # nothing was added
    more = rollout_cli(out, *sokoban, "--episodes", "10", "--resume")
    assert more.exit_code == 0, more.output
    rows = read_rows(out)
    assert sorted(r.key for r in rows) == [(group, 0) for group in range(10)]
    assert {r.env_id for r in rows} == {"Sokoban-LLM-v0"}


# -- a file that is not a rollout file: one ConfigError that names it, says what it is and what to give ---

HINT = ("a rollout file is the Parquet file `agentgym rollout --env ENV --out FILE` (or `agentgym eval "
        "--episodes-out FILE`) writes.")


def _not_rollout_files(folder: Path) -> dict[str, tuple[Path, str]]:
    """Files a user might pass as a rollout file, each with what the error must say it is."""
    good = folder / "good.parquet"
    with RolloutWriter(good) as writer:
        writer.add([row(0, 0)])
    cut = folder / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:200])  # a copy that did not finish: the magic, no footer
    (folder / "notes.txt").write_text("hello world\nsecond line\n")
    (folder / "renamed.parquet").write_text("episode_id,reward\ne0,1.0\n")
    (folder / "empty.parquet").write_bytes(b"")
    (folder / "archive.parquet").write_bytes(b"PK\x03\x04\x14\x00\x00\x00" + bytes(range(200)))
    pq.write_table(pa.table({"text": ["a"], "label": [1]}), folder / "other.parquet")
    (folder / "a-folder.parquet").mkdir()
    return {
        "text": (folder / "notes.txt", "holds text (starting 'hello world'), not Parquet"),
        "text named .parquet": (folder / "renamed.parquet", "holds text (starting 'episode_id,reward'), not Parquet"),
        "empty": (folder / "empty.parquet", "is empty, not a Parquet file"),
        "cut short": (cut, "is a Parquet file cut short (no footer: still being written, or copied in part)"),
        "other bytes": (folder / "archive.parquet", r"is not a Parquet file (it starts with the bytes b'PK\x03\x04\x14\x00\x00\x00')"),
        "other columns": (folder / "other.parquet", "is a Parquet file but not a rollout file: it lacks the columns "
                          "episode_id, group_id, index_in_group and 20 more; its columns are ['label', 'text']"),
        "folder": (folder / "a-folder.parquet", "is a folder, not a Parquet file"),
    }


@pytest.mark.parametrize("kind", ["text", "text named .parquet", "empty", "cut short", "other bytes", "other columns",
                                  "folder"])
def test_a_file_that_is_not_a_rollout_file_is_one_config_error(kind: str, tmp_path: Path) -> None:
    path, what = _not_rollout_files(tmp_path)[kind]
    with pytest.raises(ConfigError) as raised:
        read_rows(path)
    assert str(raised.value) == f"{path} {what}; {HINT}"
    with pytest.raises(ConfigError, match="rollout file is the Parquet file"):  # --resume reads it too
        done_episodes(path)


def test_an_existing_non_rollout_out_still_says_it_exists(tmp_path: Path) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("keep me")
    with pytest.raises(ConfigError, match="already exists: pass --resume"):
        RolloutWriter(out)
    with pytest.raises(ConfigError, match="holds text"):
        RolloutWriter(out, resume=True, run={"--env": "Bandit-LLM-v0"})
    assert out.read_text() == "keep me"


@pytest.mark.parametrize("kind", ["text named .parquet", "other columns"])
def test_view_says_what_the_file_is_in_one_line(kind: str, tmp_path: Path) -> None:
    path, what = _not_rollout_files(tmp_path)[kind]
    result = CliRunner().invoke(app, ["view", str(path)], terminal_width=1000)
    assert result.exit_code == 2, result.output
    assert result.output == f"error: {path} {what}; {HINT}\n"

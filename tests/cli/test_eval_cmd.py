"""``agentgym eval`` and ``rollout --policy solver``: the pieces of examples/sokoban_from_scratch.sh, small."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.cli.eval_cmd import EVAL_FILE, EvalResult, add_result, run_dir_of
from agentgym.rollout.seeds import read_seeds
from agentgym.rollout.storage import read_rows
from agentgym.trainers.loop import report
from agentgym.trainers.settings import TrainConfig

runner = CliRunner()
COMPARE_EVALS = Path(__file__).parents[2] / "scripts" / "compare_evals.py"
COMPARE_RUNS = Path(__file__).parents[2] / "scripts" / "compare_runs.py"


def _flat(output: str) -> str:
    return " ".join(output.split())  # the console wraps long lines


def test_the_solver_wins_unseen_levels() -> None:
    result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", "solver", "--episodes", "20",
                                 "-k", "dim_room=[7,7]", "-k", "num_boxes=2"], terminal_width=200)
    assert result.exit_code == 0, result.output
    output = _flat(result.output)
    assert "seeds 100000..100019" in output and "num_boxes=2" in output
    assert "│ 20 │ 100.0% │" in output


def test_random_play_is_a_baseline_with_a_table() -> None:
    result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "10",
                                 "--max-turns", "3"], terminal_width=200)
    assert result.exit_code == 0, result.output
    output = _flat(result.output)
    assert "seeds 100000..100009" in output and "success rate" in output and "invalid" in output
    # Not a terminal (a log file): progress comes as a line every tenth of the episodes.
    assert re.findall(r"^eval (\d+/10)  reward", result.output, flags=re.MULTILINE) == \
        [f"{done}/10" for done in range(1, 11)]


def test_episodes_out_keeps_every_episode_and_a_rerun_repeats_them(tmp_path: Path) -> None:
    def random_eval(out: Path) -> str:
        result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "6",
                                     "--max-turns", "4", "--episodes-out", str(out)], terminal_width=200)
        assert result.exit_code == 0, result.output
        return _flat(result.output)

    output = random_eval(tmp_path / "a.parquet")
    rows = read_rows(tmp_path / "a.parquet")
    assert sorted(row.seed for row in rows) == list(range(100000, 100006))
    assert f"│ 6 │ {sum(row.success for row in rows) / 6:.1%} │" in output
    random_eval(tmp_path / "b.parquet")
    moves = [{row.seed: [m.content for m in row.messages] for row in read_rows(tmp_path / name)}
             for name in ("a.parquet", "b.parquet")]
    assert moves[0] == moves[1]  # the random policy repeats (--seed-offset seeds it)

    before = (tmp_path / "a.parquet").read_bytes()
    again = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "2",
                                "--episodes-out", str(tmp_path / "a.parquet")], terminal_width=200)
    assert again.exit_code == 2 and "already exists: choose another --episodes-out" in _flat(again.output)
    assert (tmp_path / "a.parquet").read_bytes() == before


def test_a_sampled_eval_repeats_with_its_sampling_seed_and_another_seed_draws_again(tiny_model: str,
                                                                                     tmp_path: Path) -> None:
    def sampled(name: str, *seed: str) -> dict[int, list[str]]:
        out = tmp_path / f"{name}.parquet"
        result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--model", tiny_model, "--episodes", "3",
                                     "--temperature", "1", "--max-turns", "2", "--max-tokens", "8",
                                     "--episodes-out", str(out), *seed], terminal_width=200)
        assert result.exit_code == 0, result.output
        return {row.seed: [m.content for m in row.messages if m.role == "assistant"] for row in read_rows(out)}

    first = sampled("a", "--sampling-seed", "7")
    assert sorted(first) == [100000, 100001, 100002] and all(first.values())
    assert sampled("b", "--sampling-seed", "7") == first
    assert sampled("c") != first  # the default seeds the sampler with --seed-offset


def test_the_turn_budget_flag_cuts_episodes_short_in_the_envs_own_prompt(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "6",
                                 "--turn-budget", "3", "--episodes-out", str(tmp_path / "e.parquet")])
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "e.parquet")
    assert {row.stop_reason for row in rows if not row.success} == {"turn_budget"}
    assert max(row.num_turns for row in rows) == 3
    assert all("at most 30 turn(s)" in row.messages[0].content for row in rows)


def test_failed_seeds_out_names_the_levels_lost_and_train_reads_them(tmp_path: Path) -> None:
    seeds_file, episodes = tmp_path / "hard.txt", tmp_path / "random.parquet"
    result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "12",
                                 "--max-turns", "3", "--episodes-out", str(episodes),
                                 "--failed-seeds-out", str(seeds_file)], terminal_width=200)
    assert result.exit_code == 0, result.output
    lost = sorted(row.seed for row in read_rows(episodes) if not row.success)
    assert lost and read_seeds(seeds_file) == lost
    assert f"{len(lost)} failed level(s) written to" in _flat(result.output)
    config = TrainConfig.from_dict({"env_id": "Sokoban-LLM-v0", "episodes_per_step": 8, "group_size": 8,
                                    "level_seeds": str(seeds_file)})
    assert [config.step_seeds(step)[0] for step in range(len(lost))] == lost

    again = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "2",
                                "--failed-seeds-out", str(seeds_file)], terminal_width=200)
    assert again.exit_code == 2 and "already exists: choose another --failed-seeds-out" in _flat(again.output)
    assert read_seeds(seeds_file) == lost


@pytest.mark.parametrize("command", ["eval", "rollout"])
def test_solver_for_an_env_without_one_is_a_clear_error(command: str) -> None:
    result = runner.invoke(app, [command, "--env", "Wordle-LLM-v0", "--policy", "solver", "--episodes", "2"],
                           terminal_width=300)
    assert result.exit_code == 2
    assert "Wordle-LLM-v0 has no expert policy (--policy solver); envs with one:" in _flat(result.output)


def test_demos_sft_then_eval_writes_eval_json_and_the_report_shows_it(tmp_path: Path) -> None:
    """The recipe in miniature: solver demos -> SFT of the tiny model -> eval of its checkpoint."""
    demos = tmp_path / "demos.parquet"
    result = runner.invoke(app, ["rollout", "--env", "Sokoban-LLM-v0", "--policy", "solver", "--episodes", "4",
                                 "--out", str(demos), "--show", "0"], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = read_rows(demos)
    assert len(rows) == 4 and all(row.success for row in rows)
    run = tmp_path / "sft"
    result = runner.invoke(app, ["train", "--trainer", "sft", "--backend", "trl", "--trajectories", str(demos),
                                 "--steps", "2", "--out", str(run), "-s", "micro_batch_size=2",
                                 "-s", "lr_schedule=cosine", "-s", "warmup_steps=1"], terminal_width=200)
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--model", str(run / "final"), "--episodes", "2",
                                 "--max-turns", "2", "--max-tokens", "8"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"Result added to {run / EVAL_FILE}" in _flat(result.output)
    entry = json.loads((run / EVAL_FILE).read_text())["evals"][0]
    assert entry["episodes"] == 2 and entry["seed_offset"] == 100_000 and entry["temperature"] == 0.0
    assert 0.0 <= entry["success_rate"] <= 1.0 and entry["mean_turns"] <= 2
    page = report.render_report(run)
    assert "Evaluation (unseen seeds)" in page and str(run / "final") in page

    # An episode past --episode-timeout counts as a failure, and the eval says so and what to do.
    result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--model", str(run / "final"), "--episodes", "2",
                                 "--max-turns", "2", "--max-tokens", "8", "--episode-timeout", "0.001"],
                           terminal_width=200)
    assert result.exit_code == 1, result.output  # every episode failed: not a measurement of the policy
    output = _flat(result.output)
    assert "2 episode(s) stopped with an error" in output and "2 x the episode took longer than 0.001 s" in output
    assert "--episode-timeout" in output
    assert ("error: all 2 episodes stopped with an error (2 x the episode took longer than 0.001 s); fix that and "
            "rerun the same command.") in output


def test_eval_json_keeps_one_entry_per_setting(tmp_path: Path) -> None:
    def result(env_kwargs: dict, success: float) -> EvalResult:
        return EvalResult(env_id="Sokoban-LLM-v0", env_kwargs=env_kwargs, policy="m", episodes=10,
                          seed_offset=100_000, temperature=0.0, success_rate=success, mean_turns=5.0,
                          invalid_action_rate=0.0, mean_reward=1.0, failed=0)
    add_result(tmp_path, result({}, 0.5))
    add_result(tmp_path, result({"num_boxes": 2}, 0.2))
    add_result(tmp_path, result({}, 0.9))  # the same setting again: replaces the first
    entries = json.loads((tmp_path / EVAL_FILE).read_text())["evals"]
    assert [(e["env_kwargs"], e["success_rate"]) for e in entries] == [({"num_boxes": 2}, 0.2), ({}, 0.9)]
    (tmp_path / EVAL_FILE).write_text("{not json")  # a broken file is replaced, not a crash
    add_result(tmp_path, result({}, 0.7))
    assert len(json.loads((tmp_path / EVAL_FILE).read_text())["evals"]) == 1


def test_a_model_folder_outside_a_run_writes_nothing(tmp_path: Path) -> None:
    assert run_dir_of(str(tmp_path)) is None and run_dir_of("tiny") is None
    (tmp_path / "config.yaml").write_text("steps: 1\n")
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "final").mkdir()
    assert run_dir_of(str(tmp_path / "final")) == tmp_path.resolve()


def test_the_report_reads_the_file_eval_writes() -> None:
    assert report.EVAL_FILE == EVAL_FILE


def test_the_report_escapes_eval_json_and_survives_a_broken_one(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    entry = {"env_id": "Sokoban-LLM-v0", "env_kwargs": {"num_boxes": 2}, "policy": "<script>x</script>",
             "episodes": 5, "seed_offset": 100_000, "success_rate": 0.8, "mean_turns": 6.25,
             "invalid_action_rate": "n/a"}
    (tmp_path / EVAL_FILE).write_text(json.dumps({"evals": [entry, "junk"]}))
    page = report.render_report(tmp_path)
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>" not in page
    assert "80.0%" in page and "6.2" in page and "num_boxes=2" in page
    (tmp_path / EVAL_FILE).write_text("[1, 2")
    assert "eval.json could not be read" in report.render_report(tmp_path)


def test_compare_evals_pairs_two_evals_level_by_level(tmp_path: Path) -> None:
    """scripts/compare_evals.py, the paired test docs/results.md quotes, on two real evals."""
    for policy, turns in (("solver", "30"), ("random", "3")):
        result = runner.invoke(app, ["eval", "--env", "Sokoban-LLM-v0", "--policy", policy, "--episodes", "8",
                                     "--max-turns", turns, "--episodes-out", str(tmp_path / f"{policy}.parquet")])
        assert result.exit_code == 0, result.output
    random_solved = sum(row.success for row in read_rows(tmp_path / "random.parquet"))
    done = subprocess.run([sys.executable, str(COMPARE_EVALS), str(tmp_path / "solver.parquet"),
                           str(tmp_path / "random.parquet"), "--turns"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "A: 8/8 solved (100.0%)" in done.stdout
    assert f"only A solved: {8 - random_solved}, only B solved: 0" in done.stdout
    assert "B failed-episode turns:" in done.stdout and "unreadable" not in done.stdout  # random moves are valid

    # --first N: the N lowest seeds only (the eval of 200 levels inside one of 1000).
    first = subprocess.run([sys.executable, str(COMPARE_EVALS), str(tmp_path / "solver.parquet"),
                            str(tmp_path / "random.parquet"), "--first", "3"], capture_output=True, text=True,
                           check=False)
    random_first = sum(row.success for row in read_rows(tmp_path / "random.parquet") if row.seed < 100003)
    assert first.returncode == 0, first.stderr
    assert "A: 3/3 solved (100.0%)" in first.stdout
    assert f"only A solved: {3 - random_first}, only B solved: 0" in first.stdout

    missing = subprocess.run([sys.executable, str(COMPARE_EVALS), str(tmp_path / "solver.parquet"),
                              str(tmp_path / "x.parquet")], capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "No episodes in" in missing.stderr


def test_compare_runs_pairs_a_run_with_its_control_step_by_step(tmp_path: Path) -> None:
    """scripts/compare_runs.py: the steps both runs logged, from --from-step, and the sign test on them."""
    def write_run(name: str, successes: list[float | None]) -> Path:
        (tmp_path / name).mkdir()
        lines = [json.dumps({"step": step, "success": value, "reward": step})
                 for step, value in enumerate(successes, start=1)]  # numbered from 1, as agentgym train writes
        (tmp_path / name / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        return tmp_path / name

    control = write_run("control", [0.5, 0.2, 0.6, 0.3, 0.4, 0.1, 0.5])
    run = write_run("run", [0.5, 0.3, 0.7, 0.3, None, 0.2])  # step 5 not finite, step 7 not reached

    def compare(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(COMPARE_RUNS), *args], capture_output=True, text=True, check=False)

    done = compare(str(control), str(run))
    assert done.returncode == 0, done.stderr
    assert "step 1 (the start model in both): control 0.5, run 0.5" in done.stdout
    # steps 2, 3, 4, 6: run 0.3, 0.7, 0.3, 0.2 against 0.2, 0.6, 0.3, 0.1
    assert "steps 2 to 6 (4 shared): success 0.375 against the control's 0.3" in done.stdout
    assert "steps above the control: 3, below: 0, exact sign test p = 0.25" in done.stdout
    later = compare(str(control), str(run), "--from-step", "4", "--metric", "reward")
    assert "steps 4 to 6 (3 shared): reward 5 against the control's 5" in later.stdout
    assert "above the control: 0, below: 0, exact sign test p = 1" in later.stdout

    assert "episodes won" not in done.stdout  # these runs logged no episode counts

    none = compare(str(control), str(run), "--from-step", "8")
    assert none.returncode == 2 and "share no step from 8 on" in none.stderr
    missing = compare(str(control), str(tmp_path / "nowhere"))
    assert missing.returncode != 0 and "give the --out folder of an `agentgym train` run" in missing.stderr


def test_compare_runs_counts_the_episodes_each_run_won_in_blocks_of_steps(tmp_path: Path) -> None:
    """With ``episodes`` logged: the wins over the shared steps, and per block of consecutive steps."""
    def write_run(name: str, successes: list[float], episodes: list[int]) -> Path:
        (tmp_path / name).mkdir()
        records = [{"step": step, "success": value, "episodes": count}
                   for step, (value, count) in enumerate(zip(successes, episodes, strict=True), start=1)]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return tmp_path / name

    played = [8, 8, 8, 8, 16, 16]
    control = write_run("control", [0.25, 0.25, 0.5, 0.0, 0.25, 0.125], played)  # wins 2 2 4 0 4 2
    run = write_run("run", [0.25, 0.375, 0.5, 0.125, 0.375, 0.0625], played)  # wins 2 3 4 1 6 1
    done = subprocess.run([sys.executable, str(COMPARE_RUNS), str(control), str(run), "--blocks", "2"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "episodes won: run 15 of 56 (26.8%), control 12 (21.4%)" in lines  # steps 2 to 6
    assert "  steps 2 to 4: episodes won: run 8 of 24 (33.3%), control 6 (25.0%)" in lines
    assert "  steps 5 to 6: episodes won: run 7 of 32 (21.9%), control 6 (18.8%)" in lines

    assert not any(line.startswith("episodes paired") for line in lines)  # no episodes.jsonl: no pairing

    # With episodes.jsonl the same episode of both runs pairs by id: steps 2 to 6 only, ids in both only.
    outcomes = {"control": {(2, "a"): True, (2, "b"): False, (3, "a"): True, (4, "c"): False, (1, "a"): True},
                "run": {(2, "a"): False, (2, "b"): True, (3, "a"): True, (4, "c"): True, (1, "a"): False,
                        (4, "d"): True}}
    for name, won in outcomes.items():
        (tmp_path / name / "episodes.jsonl").write_text("".join(
            json.dumps({"step": step, "episode_id": episode, "success": success}) + "\n"
            for (step, episode), success in won.items()))
    paired = subprocess.run([sys.executable, str(COMPARE_RUNS), str(control), str(run)],
                            capture_output=True, text=True, check=False)
    assert ("episodes paired by id: 4; won only by the run: 2, only by the control: 1, exact McNemar p = 1"
            in paired.stdout.splitlines())

    reward = subprocess.run([sys.executable, str(COMPARE_RUNS), str(control), str(run), "--blocks", "9",
                             "--metric", "episodes"], capture_output=True, text=True, check=False)
    assert reward.returncode == 0, reward.stderr
    assert "episodes won" not in reward.stdout  # counts are for success only; other metrics give means
    assert reward.stdout.count("  steps ") == 5  # more blocks than steps: one step each


def test_mcnemar_exact_matches_the_binomial_test() -> None:
    spec = importlib.util.spec_from_file_location("compare_evals", COMPARE_EVALS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.mcnemar_exact(0, 0) == 1.0
    assert module.mcnemar_exact(5, 5) == 1.0
    assert module.mcnemar_exact(6, 0) == pytest.approx(2 / 64)  # scipy.stats.binomtest(0, 6).pvalue
    assert module.mcnemar_exact(47, 22) == pytest.approx(0.0035, abs=5e-5)
    assert module.mcnemar_exact(22, 47) == module.mcnemar_exact(47, 22)


def test_compare_evals_of_a_file_that_is_not_an_eval_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.parquet").write_text("not rows\n")
    done = subprocess.run([sys.executable, str(COMPARE_EVALS), str(tmp_path / "notes.parquet"),
                           str(tmp_path / "notes.parquet")], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"error: {tmp_path / 'notes.parquet'} holds text (starting 'not rows'), not "
                                        "Parquet; a rollout file is the Parquet file `agentgym rollout --env ENV "
                                        "--out FILE` (or `agentgym eval --episodes-out FILE`) writes."]

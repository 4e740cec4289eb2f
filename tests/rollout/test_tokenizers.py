"""Rows record their tokenizer, and a model refuses rows (or a server) of another one, in one line.

The mechanism is tested on the tiny model and a copy of it whose chat template differs (another
tokenizer as far as rows go); the real model's folder, where present, gives the case users meet.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import TokenizerMismatchError, UnknownTokenizerWarning
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.rows import ARROW_SCHEMA
from agentgym.rollout.storage import RolloutWriter, read_rows, recorded_tokenizers
from agentgym.rollout.tokenizers import (
    TokenizerId,
    check_rollout_file,
    check_server_tokenizer,
    check_tokenizer,
    tokenizer_id,
)
from agentgym.serve.stub import StubServer

runner = CliRunner()
REAL_MODEL = Path("/work/helpers/models/smollm2-135m")
needs_real_model = pytest.mark.skipif(not (REAL_MODEL / "tokenizer.json").exists(),
                                      reason="the SmolLM2-135M-Instruct folder is not on this machine")


def _tokenizer(folder: str | Path):  # -> a transformers tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def other_model(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with another chat template: the same vocabulary, another tokenizer for rows."""
    folder = tmp_path_factory.mktemp("other") / "tiny-other-template"
    shutil.copytree(tiny_model, folder)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    template.write_text(text.replace("<|im_start|>assistant", "<|im_start|>assistant "), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory: pytest.TempPathFactory, tiny_model: str) -> Path:
    """Random-policy Bandit episodes recorded in the tiny model's tokens, by the CLI."""
    path = tmp_path_factory.mktemp("rows") / "bandit.parquet"
    result = runner.invoke(app, ["rollout", "--env", "Bandit-LLM-v0", "--policy", "random", "--episodes", "8",
                                 "--group-size", "4", "--out", str(path), "--show", "0"])
    assert result.exit_code == 0, result.output
    return path


def _one_line_error(result: object) -> str:
    """The error of a command that failed on bad input: exit 2, its last line and its only error line
    (train says what it is about to do first), no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], result.output
    assert "Traceback" not in result.output
    return lines[-1]


# -- the fingerprint ---------------------------------------------------------------------------------

def test_the_tiny_sizes_share_one_tokenizer(tiny_model: str) -> None:
    from agentgym.models import resolve_model

    tiny, bigger = tokenizer_id(_tokenizer(tiny_model)), tokenizer_id(_tokenizer(resolve_model("tiny-256x4")))
    assert tiny.name != bigger.name and tiny.digest == bigger.digest


def test_another_chat_template_is_another_tokenizer(tiny_model: str, other_model: Path) -> None:
    assert tokenizer_id(_tokenizer(tiny_model)).digest != tokenizer_id(_tokenizer(other_model)).digest


def test_a_fingerprint_reads_back_as_written() -> None:
    written = TokenizerId("/models/a@b", "0123456789abcdef")  # an @ in the name: the hash is after the last
    assert str(written) == "/models/a@b@0123456789abcdef"
    assert TokenizerId.parse(str(written)) == written
    assert TokenizerId.parse("no-hash") == TokenizerId("no-hash", "")


def test_rows_record_the_tokenizer_of_their_renderer(renderer: ChatRenderer, tmp_path: Path) -> None:
    config = RolloutConfig(env_id="Bandit-LLM-v0", episodes=2)
    rows = asyncio.run(EnvManager(config, RandomPolicy(seed=0), renderer=renderer).run())
    assert {row.tokenizer for row in rows} == {renderer.tokenizer_id}
    assert renderer.tokenizer_id == str(tokenizer_id(renderer.tokenizer))
    with RolloutWriter(tmp_path / "rows.parquet") as writer:
        writer.add(rows)
    assert [row.tokenizer for row in read_rows(tmp_path / "rows.parquet")] == [renderer.tokenizer_id] * 2
    assert recorded_tokenizers(tmp_path / "rows.parquet") == [renderer.tokenizer_id]


def test_a_file_written_before_rows_recorded_it_loads_and_warns_once(rows_file: Path, tmp_path: Path,
                                                                     tiny_model: str) -> None:
    old = tmp_path / "old.parquet"
    table = pq.read_table(rows_file)
    pq.write_table(table.drop_columns(["tokenizer"]), old)
    assert {row.tokenizer for row in read_rows(old)} == {None}
    with pytest.warns(UnknownTokenizerWarning, match="record no tokenizer") as warned:
        check_rollout_file(old, _tokenizer(tiny_model))
    assert len(warned) == 1  # one for the file, not one a row


# -- the check ---------------------------------------------------------------------------------------

def test_rows_of_another_tokenizer_are_refused_naming_both(rows_file: Path, other_model: Path) -> None:
    rows = read_rows(rows_file)
    made_by = TokenizerId.parse(rows[0].tokenizer)
    with pytest.raises(TokenizerMismatchError) as caught:
        check_tokenizer(rows, _tokenizer(other_model), str(rows_file), model="mine")
    message = str(caught.value)
    assert str(rows_file) in message and made_by.name in message and "mine has another tokenizer" in message
    assert f"--model {made_by.name}" in message and "roll out again" in message


def test_rows_of_two_tokenizers_are_refused(rows_file: Path, tiny_model: str) -> None:
    rows = read_rows(rows_file)
    rows[0] = rows[0].model_copy(update={"tokenizer": "elsewhere@0123456789abcdef"})
    with pytest.raises(TokenizerMismatchError, match="rows of 2 different tokenizers"):
        check_tokenizer(rows, _tokenizer(tiny_model), "rows")


def test_a_pairs_file_is_text_and_not_checked(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "2+2?", "chosen": "4", "rejected": "5"}) + "\n", encoding="utf-8")
    assert recorded_tokenizers(pairs) is None
    parquet_pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"prompt": ["2+2?"], "chosen": ["4"], "rejected": ["5"]}), parquet_pairs)
    assert recorded_tokenizers(parquet_pairs) is None


def test_training_on_rows_of_a_tiny_size_with_the_same_tokenizer_runs(rows_file: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--trajectories", str(rows_file), "--model", "tiny-256x4", "--steps", "1",
                                 "--group-size", "4", "--episodes-per-step", "4", "--out", str(tmp_path / "run")],
                           terminal_width=200)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("trainer", ["grpo", "sft"])
def test_training_on_rows_of_another_tokenizer_is_one_line(rows_file: Path, other_model: Path, tmp_path: Path,
                                                           trainer: str) -> None:
    result = runner.invoke(app, ["train", "--trainer", trainer, "--trajectories", str(rows_file), "--model",
                                 str(other_model), "--steps", "1", "--out", str(tmp_path / "run")],
                           terminal_width=400)
    line = _one_line_error(result)
    assert "was tokenized by" in line and str(other_model) in line
    assert not (tmp_path / "run" / "config.yaml").exists()  # refused before the run is written down


# -- agentgym view --tokens ------------------------------------------------------------------------

def test_view_decodes_with_the_rows_tokenizer_and_refuses_another(rows_file: Path, other_model: Path) -> None:
    shown = runner.invoke(app, ["view", str(rows_file), "--tokens", "--limit", "1"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "<|im_start|>assistant" in shown.output
    refused = runner.invoke(app, ["view", str(rows_file), "--tokens", "--model", str(other_model)],
                            terminal_width=400)
    assert "was tokenized by" in _one_line_error(refused)


def test_view_says_when_the_rows_tokenizer_does_not_load(rows_file: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved.parquet"
    table = pq.read_table(rows_file)
    gone = pa.array(["/nowhere/model@0123456789abcdef"] * len(table), pa.string())
    pq.write_table(table.set_column(table.schema.get_field_index("tokenizer"), "tokenizer", gone), moved)
    line = _one_line_error(runner.invoke(app, ["view", str(moved), "--tokens"], terminal_width=400))
    assert "/nowhere/model" in line and "does not load here" in line and "--model" in line


def test_view_of_an_old_file_decodes_with_tiny_and_says_so(rows_file: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.parquet"
    pq.write_table(pq.read_table(rows_file).drop_columns(["tokenizer"]), old)
    shown = runner.invoke(app, ["view", str(old), "--tokens", "--limit", "1"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "record no tokenizer" in shown.output and "<|im_start|>assistant" in shown.output


# -- a server of another model -----------------------------------------------------------------------

@pytest.fixture
def tokenize_server() -> Iterator[tuple[str, list[list[int]]]]:
    """A server whose POST /tokenize answers the ids put in the list it yields."""
    answers: list[list[int]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"count": len(answers[0]), "max_model_len": 512, "tokens": answers[0]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", answers
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_is_checked_through_its_tokenize_route(tokenize_server: tuple[str, list[list[int]]],
                                                        tiny_model: str) -> None:
    base_url, answers = tokenize_server
    tokenizer = _tokenizer(tiny_model)
    messages = [{"role": "system", "content": "Probe: reply with one word."},
                {"role": "user", "content": "héllo wörld  12 + 3 = 15 <answer>Up</answer>\n#P_O#"}]
    ours = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                              return_dict=False))
    answers.append(ours)
    assert check_server_tokenizer(base_url, tokenizer, model_name="tiny") is True
    answers[0] = ours[:5] + [ours[5] + 1] + ours[6:]
    with pytest.raises(TokenizerMismatchError, match="part at token 5 of"):
        check_server_tokenizer(base_url, tokenizer, model_name="tiny")


def test_a_server_without_a_tokenize_route_is_not_checked(tiny_model: str) -> None:
    with StubServer(delay=0.0) as stub:
        assert check_server_tokenizer(stub.base_url, _tokenizer(tiny_model), model_name="stub") is False


# -- the real model's folder ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random-policy Bandit episodes in SmolLM2's tokens (only its tokenizer is loaded)."""
    path = tmp_path_factory.mktemp("real") / "bandit.parquet"
    result = runner.invoke(app, ["rollout", "--env", "Bandit-LLM-v0", "--policy", "random", "--episodes", "8",
                                 "--group-size", "4", "--model", str(REAL_MODEL), "--out", str(path), "--show", "0"])
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.slow
@needs_real_model
def test_tiny_on_the_real_models_rows_is_one_line_not_an_index_error(real_rows: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--trajectories", str(real_rows), "--model", "tiny", "--steps", "1",
                                 "--group-size", "4", "--episodes-per-step", "4", "--out", str(tmp_path / "run")],
                           terminal_width=400)
    line = _one_line_error(result)
    assert f"tokenized by {REAL_MODEL}" in line and "49,152" not in line and "1,024 tokens" in line


@pytest.mark.slow
@needs_real_model
def test_the_real_model_on_tiny_rows_is_one_line(rows_file: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--trajectories", str(rows_file), "--model", str(REAL_MODEL), "--steps",
                                 "1", "--group-size", "4", "--episodes-per-step", "4", "--out", str(tmp_path / "run")],
                           terminal_width=400)
    line = _one_line_error(result)
    assert "tiny-h128" in line and "49,152 tokens" in line


@pytest.mark.slow
@needs_real_model
def test_the_real_templates_rows_are_the_template_of_the_whole_conversation() -> None:
    """SmolLM2's template inserts its own system prompt ("You are a helpful AI assistant named SmolLM")
    when a conversation has none; the renderer always sends the env's instructions as the system message,
    so the prompt ids plus the completion ids are the template's ids of the conversation, turn for turn,
    and a turn ends in ``<|im_end|>`` (the eos: the server's stop) then the template's newline."""
    tokenizer = _tokenizer(REAL_MODEL)
    renderer = ChatRenderer(tokenizer)
    assert tokenizer.convert_ids_to_tokens([renderer.eos_id]) == ["<|im_end|>"]
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert renderer.close_turn_ids([5, renderer.eos_id]) == newline
    assert renderer.close_turn_ids([5]) == [renderer.eos_id, *newline]
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=2, max_turns=3)
    for row in asyncio.run(EnvManager(config, RandomPolicy(seed=0), renderer=renderer).run()):
        messages = [message.model_dump() for message in row.messages]
        played = messages if row.messages[-1].role == "assistant" else messages[:-1]  # the last reply is not in the ids
        whole = list(tokenizer.apply_chat_template(played, tokenize=True, return_dict=False))
        assert row.prompt_ids + row.completion_ids == whole
        assert "named SmolLM" not in tokenizer.decode(row.prompt_ids)  # the env's instructions are the system prompt
    default = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "named SmolLM" in default  # what a conversation without a system message would have got

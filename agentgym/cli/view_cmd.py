"""``agentgym view``: read recorded episodes as conversations, or see their tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from agentgym.cli.common import console, fail
from agentgym.cli.rollout_cmd import print_episode
from agentgym.errors import AgentGymError, ConfigError
from agentgym.rollout.rows import TrajectoryRow

__all__ = ["TOKEN_STYLES", "token_legend", "view_command"]


def view_command(
    path: Annotated[Path, typer.Argument(metavar="FILE", help="A Parquet file written by agentgym rollout.")],
    episode: Annotated[str | None, typer.Option(help="Only the episode whose id contains this text.")] = None,
    limit: Annotated[int, typer.Option(help="Print at most this many episodes.")] = 5,
    tokens: Annotated[bool, typer.Option(help="Also show each episode's tokens, coloured by who wrote them (a legend says which is which).")] = False,
    model: Annotated[str | None, typer.Option(help="Tokenizer to decode --tokens with (default: the one the rows record).")] = None,
) -> None:
    """Print recorded episodes as readable conversations."""
    from agentgym.rollout.storage import read_rows

    if not path.exists():
        raise fail(f"{path} does not exist: give a file written by `agentgym rollout --out`.")
    try:
        rows = [row for row in read_rows(path) if episode is None or episode in row.episode_id]
    except AgentGymError as exc:  # not a rollout file: one line that says what it is
        raise fail(str(exc)) from exc
    if not rows:
        raise fail(f"no episode in {path}" + (f" matches {episode!r}." if episode else "."))
    try:
        decode = _decoder(rows, model, path) if tokens else None
    except AgentGymError as exc:  # another tokenizer than the rows', or theirs does not load
        raise fail(str(exc)) from exc
    if decode is not None:
        console.print(token_legend())
    for row in rows[:limit]:
        print_episode(row)
        if decode is not None:
            console.print(_token_view(row, decode))
    console.print(f"[dim]{min(limit, len(rows))} of {len(rows)} rows shown.[/]")


def _decoder(rows: list[TrajectoryRow], model: str | None, path: Path):  # -> Callable[[list[int]], str]
    """How --tokens decodes ``rows``: with --model's tokenizer if given (refused when the rows record
    another), else with the one the rows record; rows that record none with tiny's, as before they did."""
    from agentgym.rollout.tokenizers import check_tokenizer, load_tokenizer_of

    recorded = [row.tokenizer for row in rows if row.tokenizer is not None]
    if not recorded:  # a file written before rows recorded their tokenizer: nothing to check against
        if model is None:
            console.print("[yellow]These rows record no tokenizer (an older file): decoding with tiny's; "
                          "--model chooses another.[/]")
        tokenizer = _load_tokenizer(model or "tiny")
    elif model is not None:
        tokenizer = _load_tokenizer(model)
        check_tokenizer(rows, tokenizer, str(path), model=model)
    else:
        tokenizer = load_tokenizer_of(recorded[0])
        if tokenizer is None:
            raise ConfigError(f"the rows of {path} were tokenized by {recorded[0]}, which does not load here "
                              "(a folder gone, or a hub id not in the cache): give --model with that tokenizer.")
        check_tokenizer(rows, tokenizer, str(path))  # one file, one tokenizer
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def _load_tokenizer(model: str):  # -> a transformers tokenizer
    from transformers import AutoTokenizer

    from agentgym.models import resolve_model

    try:
        return AutoTokenizer.from_pretrained(resolve_model(model))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--model {model!r} has no tokenizer here: give 'tiny', a local model folder "
                          "or a hub id in the cache.") from exc


#: the colours of --tokens: (style, what the tokens are), one source for the view and its legend
TOKEN_STYLES = {"learned": ("bold green", "green: sampled and learned"),
                "unlearned": ("yellow", "yellow: played, not learned (e.g. DAgger's expert moves)"),
                "env": ("dim", "dim: the prompt and the env's replies")}


def token_legend() -> Text:
    """The line above --tokens' episodes that says what each colour is."""
    legend = Text("tokens: ")
    for index, (style, meaning) in enumerate(TOKEN_STYLES.values()):
        legend.append(("; " if index else "") + meaning, style=style)
    return legend


def _token_view(row: TrajectoryRow, decode) -> Text:  # noqa: ANN001
    """The row's tokens as text, each run coloured by who wrote it: sampled and learned
    (green), played but not learned (yellow: a turn with mask 0, e.g. DAgger's), the env (dim)."""
    text = Text()
    text.append(decode(row.prompt_ids), style=TOKEN_STYLES["env"][0])
    mask = row.completion_mask
    unlearned = [0] * len(mask)
    for span in row.turns:
        if not any(mask[span.start:span.end]):
            unlearned[span.start:span.end] = [1] * (span.end - span.start)
    start = 0
    for end in range(1, len(mask) + 1):
        if end == len(mask) or (mask[end], unlearned[end]) != (mask[start], unlearned[start]):
            kind = "learned" if mask[start] else "unlearned" if unlearned[start] else "env"
            style = TOKEN_STYLES[kind][0]
            text.append(decode(row.completion_ids[start:end]), style=style)
            start = end
    return text

"""DPO's learner (``--trainer dpo``): preference pairs from episode groups, or from a pairs file.

Pairs come from a step's groups (one seed each): played now (``--env``), or whole groups of a
rollout file (``--trajectories rows.parquet``) — the higher-reward episode is chosen, the lower
rejected (:func:`preference_pairs`; ``dpo.pairs`` and ``dpo.pair_margin`` say which). A file in
TRL's prompt / chosen / rejected format (JSONL or Parquet) is read as groups of two
(:func:`pair_file_rows`). A pair's log-probability is the sum over the policy's own sampled
tokens of all its rows; the env's and tools' tokens carry none, as in GRPO. The reference is
the model the run starts from (the skeleton keeps it, and in OUT/reference for a resume).

On the trl backend, pairs of one-row episodes take TRL's ``DPOTrainer.compute_loss``
(:class:`~agentgym.trainers.engines.base.PreferenceLoss`); the rest take :func:`dpo_loss`.

A step's pairs run through the shared mini-batch loop
(:class:`~agentgym.trainers.learners.minibatch.MiniBatchLoop`): ``optim.epochs`` passes over them,
each split into ``optim.mini_batches`` updates, each update's pairs in passes of at most
``optim.micro_batch_size`` pairs and ``optim.micro_batch_tokens`` tokens (both completions of a
pair in the same pass, since the loss couples them) whose gradients add up to the mean over the
mini-batch's pairs. The metrics of a step are measured in the first epoch's passes, before each
pair's update: on pairs the model has not been trained on (held out).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow, first_rows
from agentgym.trainers.engines.base import Engine, PreferenceLoss
from agentgym.trainers.engines.batch import TrainSequence, collate, filler_sequence, to_sequences
from agentgym.trainers.engines.distributed import all_reduce
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.learners.minibatch import MiniBatchLoop
from agentgym.trainers.losses.preference import dpo_loss

__all__ = ["DPOLearner", "Pair", "pair_file_rows", "preference_pairs", "read_preference_rows"]

_PAIR_COLUMNS = {"prompt", "chosen", "rejected"}


@dataclass(frozen=True)
class Pair:
    """Two episodes of one group: the preferred one and the other (their episode ids)."""

    chosen: str
    rejected: str


def preference_pairs(rows: Sequence[TrajectoryRow], mode: str = "best_worst", margin: float = 0.0
                     ) -> tuple[list[Pair], int]:
    """The pairs of ``rows``' groups, and how many groups gave none (all rewards within ``margin``).

    best_worst: each group's highest-reward episode against its lowest; all: every two episodes of
    a group. Only where the higher reward beats the lower by more than ``margin``; ties keep the
    order of the group.
    """
    groups: OrderedDict[tuple[str, int, int], list[TrajectoryRow]] = OrderedDict()
    for row in first_rows(rows):
        if row.error is None:
            groups.setdefault((row.env_id, row.seed, row.group_id), []).append(row)
    pairs: list[Pair] = []
    without = 0
    for episodes in groups.values():
        ranked = sorted(episodes, key=lambda row: -row.reward)  # stable: ties keep the group's order
        if mode == "best_worst":
            candidates = [(ranked[0], ranked[-1])] if len(ranked) > 1 else []
        else:
            candidates = [(high, low) for i, high in enumerate(ranked) for low in ranked[i + 1:]]
        found = [Pair(high.episode_id, low.episode_id) for high, low in candidates if high.reward - low.reward > margin]
        pairs += found
        without += not found
    return pairs, without


def pair_file_rows(path: str, tokenizer: Any) -> list[TrajectoryRow]:
    """A prompt / chosen / rejected file (TRL's preference format; JSONL or Parquet) as groups of
    two rows: the chosen completion with reward 1, the rejected with 0, the whole completion learned.

    Text prompts are tokenized as they are (TRL's standard format; the completion gets the eos
    token); a prompt that is a list of messages goes through the chat template, and so do its
    completions (TRL's conversational format).
    """
    records = _read_records(path)
    rows = []
    for number, record in enumerate(records):
        prompt_ids, completions = _tokenized_pair(record, tokenizer, path, number)
        for index, (name, ids) in enumerate(completions):
            rows.append(TrajectoryRow(
                episode_id=f"pair{number}/{name}", group_id=number, index_in_group=index, env_id="pairs",
                seed=number, prompt_ids=prompt_ids, completion_ids=ids, completion_mask=[1] * len(ids),
                reward=1.0 - index, success=index == 0, num_turns=1, terminated=True))
    return rows


def _read_records(path: str) -> list[dict[str, Any]]:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as file:
        try:
            return [json.loads(line) for line in file if line.strip()]
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path!r}: line {exc.lineno} is not JSON; a pairs file has one "
                              "{\"prompt\": ..., \"chosen\": ..., \"rejected\": ...} object a line.") from None


def _tokenized_pair(record: Any, tokenizer: Any, path: str, number: int
                    ) -> tuple[list[int], list[tuple[str, list[int]]]]:
    if not isinstance(record, dict) or not _PAIR_COLUMNS <= set(record):
        raise ConfigError(f"{path!r}: pair {number} lacks one of prompt, chosen, rejected.")
    prompt = record["prompt"]
    if isinstance(prompt, list):  # conversational: the completions are assistant messages
        prompt_ids = list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                        return_dict=False))
        def completion(messages: Any) -> list[int]:
            whole = list(tokenizer.apply_chat_template(prompt + list(messages), tokenize=True, return_dict=False))
            return whole[len(prompt_ids):]
    else:
        prompt_ids = tokenizer.encode(str(prompt), add_special_tokens=False)
        def completion(text: Any) -> list[int]:
            return tokenizer.encode(str(text), add_special_tokens=False) + [tokenizer.eos_token_id]
    completions = [("chosen", completion(record["chosen"])), ("rejected", completion(record["rejected"]))]
    if not prompt_ids or not all(ids for _, ids in completions):
        raise ConfigError(f"{path!r}: pair {number} has an empty prompt or completion.")
    return prompt_ids, completions


def read_preference_rows(path: str, tokenizer: Any) -> list[TrajectoryRow]:
    """The rows of ``--trajectories`` for preference pairs: a pairs file's groups of two
    (:func:`pair_file_rows`), or a rollout file's rows (its groups pair up by reward)."""
    if "," not in path and _is_pair_file(path):
        return pair_file_rows(path, tokenizer)
    from agentgym.rollout.storage import read_rows

    return list(read_rows(path))


def _is_pair_file(path: str) -> bool:
    """Whether ``path`` holds prompt / chosen / rejected columns (else it should be a rollout file)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        columns = set(pq.read_schema(path).names)
    else:
        with open(path, encoding="utf-8") as file:
            first = next((line for line in file if line.strip()), "{}")
        try:
            record = json.loads(first)
        except json.JSONDecodeError:
            record = {}
        columns = set(record) if isinstance(record, dict) else set()
    if _PAIR_COLUMNS <= columns:
        return True
    if {"prompt_ids", "completion_ids"} <= columns:
        return False
    raise ConfigError(f"{path!r} is neither a rollout file (agentgym rollout --out) nor a pairs file "
                      f"(prompt, chosen, rejected columns); its columns are {sorted(columns)[:8]}.")


@dataclass
class _Totals:
    """Sums over a step's pairs."""

    loss: float = 0.0
    margin: float = 0.0
    correct: float = 0.0
    chosen: float = 0.0
    rejected: float = 0.0

    def tensor(self) -> torch.Tensor:
        return torch.tensor([self.loss, self.margin, self.correct, self.chosen, self.rejected], dtype=torch.float64)


class DPOLearner(Learner):
    """DPO on a step's pairs (see the module's docstring)."""

    sections = frozenset({"rollout", "server", "warmup", "dpo"})
    needs_reference = True

    def __init__(self, config: Any, engine: Engine) -> None:
        super().__init__(config, engine)
        self.settings = config.dpo
        self._episodes: dict[str, list[TrajectoryRow]] = {}
        self.loop: MiniBatchLoop[Pair] = MiniBatchLoop(engine, config, size=self._pair_length, rows=self._pair_rows,
                                                       weight=lambda pair: float(pair is not _FILLER),
                                                       filler=lambda: _FILLER)

    def read_recorded(self, path: str) -> list[TrajectoryRow]:
        return read_preference_rows(path, self.engine.tokenizer)

    def _pair_length(self, pair: Pair) -> int:
        rows = self._episodes.get(pair.chosen, []) + self._episodes.get(pair.rejected, [])
        return max((len(row.prompt_ids) + len(row.completion_ids) for row in rows), default=2)

    def _pair_rows(self, pair: Pair) -> int:
        return max(len(self._episodes.get(pair.chosen, [])) + len(self._episodes.get(pair.rejected, [])), 1)

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        started = time.perf_counter()
        pairs, unpaired = preference_pairs(rows, self.settings.pairs, self.settings.pair_margin)
        self._episodes = {}
        for row in rows:
            self._episodes.setdefault(row.episode_id, []).append(row)
        totals, measured = _Totals(), set()

        def backward_pass(chunk: list[Pair], normaliser: float) -> None:
            self._add_chunk([pair for pair in chunk if pair is not _FILLER], normaliser, totals, measured)

        updates = self.loop.run(pairs, backward_pass)
        summed = all_reduce(totals.tensor(), self.engine.dist)
        metrics = {"updates": float(updates.updates), "pairs": float(len(pairs)), "unpaired_groups": float(unpaired),
                   "grad_norm": updates.grad_norm, "train_seconds": time.perf_counter() - started}
        if updates.lr is not None:
            metrics["lr"] = updates.lr
        if pairs:
            loss, margin, correct, chosen, rejected = (float(x) / len(pairs) for x in summed)
            metrics.update({"loss": loss, "reward_margin": margin, "reward_accuracy": correct,
                            "chosen_reward": chosen, "rejected_reward": rejected})
        return metrics

    def idle_reason(self, metrics: dict[str, float]) -> str:
        return (f"no pair: in each of the {metrics.get('unpaired_groups', 0):.0f} groups the rewards were within "
                f"pair_margin ({self.settings.pair_margin:g}) of each other")

    def _add_chunk(self, chunk: list[Pair], normaliser: float, totals: _Totals, measured: set[int]) -> None:
        """Forward and backward one pass of pairs; the sums of the pairs not measured yet into ``totals``."""
        engine = self.engine
        names = list(dict.fromkeys(name for pair in chunk for name in (pair.chosen, pair.rejected)))
        sequences, owners = _episode_sequences(names, self._episodes, engine.pad_id)
        batch = collate(sequences, pack=engine.packs, pad_id=engine.pad_id)
        # One sequence per episode, logprobs at temperature 1: the backend's own DPO can take the pairs.
        backend = engine if isinstance(engine, PreferenceLoss) else None
        backend_loss = (backend is not None and bool(chunk) and owners == list(range(len(names)))
                        and self.config.rollout.temperature == 1.0)
        with torch.no_grad() if backend_loss else contextlib.nullcontext():
            logprobs, _ = engine.logprobs(batch)
        with torch.no_grad():
            reference, _ = engine.logprobs(batch, reference=True)
        device = logprobs.device
        mask = batch.loss_mask.to(device)
        owner = torch.tensor(owners, device=device)
        width = max(len(names), 1)
        summed = torch.zeros(width, dtype=logprobs.dtype, device=device).index_add(0, owner, (logprobs * mask).sum(-1))
        if not chunk:
            engine.backward(summed.sum() * 0.0)
            return
        ref_summed = torch.zeros_like(summed).index_add(0, owner, (reference * mask).sum(-1))
        tokens = torch.zeros_like(summed).index_add(0, owner, mask.sum(-1))
        chosen = torch.tensor([names.index(pair.chosen) for pair in chunk], device=device)
        rejected = torch.tensor([names.index(pair.rejected) for pair in chunk], device=device)
        losses, margins = dpo_loss(summed[chosen], summed[rejected], ref_summed[chosen], ref_summed[rejected],
                                   beta=self.settings.beta, kind=self.settings.dpo_loss,
                                   chosen_tokens=tokens[chosen], rejected_tokens=tokens[rejected])
        if backend_loss and backend is not None:  # the metrics above come from the same weights, before the update
            mean = backend.preference_loss([sequences[i] for i in chosen.tolist()],
                                          [sequences[i] for i in rejected.tolist()],
                                          ref_summed[chosen], ref_summed[rejected])
            engine.backward(mean * len(chunk) / normaliser)
        else:
            engine.backward(losses.sum() / normaliser)
        fresh = [i for i, pair in enumerate(chunk) if id(pair) not in measured]  # each pair once, before its update
        measured.update(id(pair) for pair in chunk)
        if not fresh:
            return
        keep = torch.tensor(fresh, device=device)
        beta = self.settings.beta
        totals.loss += float(losses.detach()[keep].sum())
        totals.margin += float(margins[keep].sum())
        totals.correct += float((margins[keep] > 0).sum())
        totals.chosen += float(beta * (summed[chosen] - ref_summed[chosen]).detach()[keep].sum())
        totals.rejected += float(beta * (summed[rejected] - ref_summed[rejected]).detach()[keep].sum())


#: the pair a rank with fewer passes runs: nothing to learn
_FILLER = Pair("", "")


def _episode_sequences(names: list[str], episodes: dict[str, list[TrajectoryRow]], pad_id: int
                       ) -> tuple[list[TrainSequence], list[int]]:
    """The training sequences of the named episodes' rows, and the index in ``names`` each belongs to
    (one filler sequence, owned by 0, where there are none: a pass all the same, with no gradient)."""
    sequences: list[TrainSequence] = []
    owners: list[int] = []
    for index, name in enumerate(names):
        for row in episodes[name]:
            found = to_sequences([row], [0.0])
            sequences += found
            owners += [index] * len(found)
    if not sequences:
        return [filler_sequence(pad_id)], [0]
    return sequences, owners

"""The running batch: rows (one per choice), their KV cache, and one decode step.

Rows are left-padded so that every row's newest token sits in the last
column. A step feeds each row's last sampled token with its own position
(``lengths``) and the padding mask; a prefill runs new rows' prompts as a
separate left-padded batch whose cache then joins the running one (see
``agentgym.serve.kv``). With a prefix cache, a prefill starts from the KV
stored for the longest known prefix of each prompt and runs only the rest,
and a finished row's KV is stored for the prompts that continue it (see
``agentgym.serve.prefix``). This object only holds tensors and runs the
model; deciding who joins, sampling and finishing rows is the engine's job.
Only the engine thread touches it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from agentgym.serve import kv
from agentgym.serve.prefix import PrefixCache, PrefixHit
from agentgym.serve.sampling import SamplingParams
from agentgym.serve.text import TextTracker

__all__ = ["DecodeBatch", "EngineFailure", "Sequence", "SequenceUpdate", "Sink", "usable_prefix"]


@dataclass(frozen=True, slots=True)
class SequenceUpdate:
    """What a choice gained since its last update (all of it, for a non-streamed choice)."""

    index: int
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: str | None
    stop_reason: int | str | None
    policy_version: int
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """The batch holding this choice failed; ``message`` says why (the server answers 500)."""

    message: str


@dataclass(eq=False, slots=True)
class Sink:
    """Where a request's updates go: an asyncio queue, fed from the engine thread."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[SequenceUpdate | EngineFailure]
    stream: bool


@dataclass(eq=False, slots=True)
class Sequence:
    """One choice being generated; owned by the engine thread once submitted.

    ``cancelled`` is the only field another thread writes (a client went away).
    """

    prompt_ids: list[int]
    params: SamplingParams
    sink: Sink
    index: int = 0
    adapter: str | None = None
    generator: torch.Generator | None = None
    tracker: TextTracker | None = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    policy_version: int = 0
    cancelled: bool = False
    sent: int = 0
    prefix_hit: PrefixHit | None = None  # the stored prefix its prompt was looked up to
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def finish(self, reason: str, stop_reason: int | str | None = None) -> None:
        self.finish_reason, self.stop_reason = reason, stop_reason

    def take_update(self, text: str) -> SequenceUpdate:
        """The tokens not yet sent, with ``text`` (a delta when streaming, else the whole text)."""
        start, self.sent = self.sent, len(self.output_ids)
        return SequenceUpdate(
            index=self.index,
            token_ids=self.output_ids[start:],
            logprobs=self.logprobs[start:] if self.params.logprobs is not None else [],
            top_logprobs=self.top_logprobs[start:],
            text=text,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
            policy_version=self.policy_version,
            cached_tokens=self.cached_tokens,
        )


class DecodeBatch:
    """Tensors of the rows being decoded together, and the two forward passes."""

    def __init__(self, model: torch.nn.Module, pad_id: int, device: torch.device,
                 prefix: PrefixCache | None = None) -> None:
        self.model: torch.nn.Module = model
        self.key: str | None = None  # the LoRA adapter of the rows (None: the base model)
        self.prefix = prefix if prefix is not None and prefix.enabled else None
        self.pad_id = pad_id
        self.device = device
        self.rows: list[Sequence] = []
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [rows, columns], 1 = a real token
        self.lengths = torch.zeros(0, dtype=torch.long, device=device)  # real tokens in the cache
        self.last = torch.zeros(0, dtype=torch.long, device=device)  # sampled, not yet fed
        self.temperature = torch.zeros(0, device=device)
        self.top_p = torch.ones(0, device=device)
        self.reshapable = True
        self._keep_arg = False
        self._cache_arg = "past_key_values"
        self.use(model)

    def __len__(self) -> int:
        return len(self.rows)

    def use(self, model: torch.nn.Module, key: str | None = None) -> None:
        """Decode with ``model`` (adapter ``key``) from now on (only switched while the batch is empty)."""
        self.model, self.key = model, key
        parameters = inspect.signature(model.forward).parameters
        self._keep_arg = "logits_to_keep" in parameters
        # transformers 5.24 renamed past_key_values to cache (the old name warns, and goes in 5.40).
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"

    @property
    def width(self) -> int:
        """Columns of the cache (the longest row, padding included)."""
        return 0 if self.mask is None else int(self.mask.shape[1])

    def prefill(self, new: Seq[Sequence]) -> torch.Tensor:
        """Run the prompts of ``new`` rows, append them; returns their next-token logits.

        A row looked up to a stored prefix (``seq.prefix_hit``) takes that KV as
        its past and runs only the rest of its prompt (``_reused`` says how much).
        """
        reused = _reused(new)
        width = max(len(seq.prompt_ids) - skip for seq, skip in zip(new, reused, strict=True))
        past = max(reused)
        ids = torch.full((len(new), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(new), past + width), dtype=torch.long)
        for row, (seq, skip) in enumerate(zip(new, reused, strict=True)):
            run = seq.prompt_ids[skip:]
            ids[row, width - len(run):] = torch.tensor(run)
            mask[row, past + width - len(seq.prompt_ids):] = 1
            seq.cached_tokens = skip
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(dim=1) - 1).clamp_min(0)[:, past:]
        cache = self._past(new, reused, past, width) if past else kv.empty_cache()
        extra = {"logits_to_keep": 1} if self._keep_arg else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         use_cache=True, **{self._cache_arg: cache}, **extra)
        self.reshapable = self.reshapable and kv.can_reshape(cache)
        self.cache, self.mask = kv.join(self.cache, self.mask, cache, mask)
        self._append_rows(new, mask.sum(dim=1))
        return out.logits[:, -1, :]

    def _past(self, new: Seq[Sequence], reused: list[int], columns: int, width: int) -> DynamicCache:
        """A cache of ``columns`` columns holding each row's reused KV, right-aligned, with room for
        the ``width`` columns the prefill adds (so the forward pass writes them in place)."""
        template = next(seq.prefix_hit.entry.layers for seq, skip in zip(new, reused, strict=True)
                        if skip and seq.prefix_hit is not None)
        buffers: kv.Layers = []
        for layer, (keys, values) in enumerate(template):
            pair = []
            for part, stored in enumerate((keys, values)):
                buffer = kv.buffer_like(stored, len(new), columns + width)
                buffer[:, :, :columns] = 0  # padding left of each row's reused part
                for row, (seq, skip) in enumerate(zip(new, reused, strict=True)):
                    if skip and seq.prefix_hit is not None:
                        buffer[row, :, columns - skip:columns] = seq.prefix_hit.entry.layers[layer][part][:, :skip]
                pair.append(buffer)
            buffers.append((pair[0], pair[1]))
        return kv.wrap(buffers, columns)

    def _append_rows(self, new: Seq[Sequence], lengths: torch.Tensor) -> None:
        self.rows.extend(new)
        params = [seq.params for seq in new]
        self.lengths = torch.cat([self.lengths, lengths])
        self.last = torch.cat([self.last, torch.zeros(len(new), dtype=torch.long, device=self.device)])
        self.temperature = torch.cat(
            [self.temperature, torch.tensor([p.temperature for p in params], device=self.device)])
        self.top_p = torch.cat(
            [self.top_p, torch.tensor([p.top_p for p in params], device=self.device)])

    def decode(self) -> torch.Tensor:
        """Feed every row's last sampled token; returns next-token logits ``[rows, vocab]``."""
        if self.mask is None or self.cache is None:
            raise RuntimeError("decode() on an empty batch")
        ones = self.mask.new_ones((len(self.rows), 1))
        mask = torch.cat([self.mask, ones], dim=1)
        out = self.model(input_ids=self.last.unsqueeze(1), attention_mask=mask,
                         position_ids=self.lengths.unsqueeze(1), use_cache=True, **{self._cache_arg: self.cache})
        self.mask = mask
        self.lengths = self.lengths + 1
        return out.logits[:, -1, :]

    def set_last(self, start: int, tokens: list[int]) -> None:
        """Record the tokens just sampled for rows ``start:`` (fed by the next step)."""
        self.last[start:] = torch.tensor(tokens, dtype=torch.long, device=self.device)

    def remove(self, gone: set[int]) -> None:
        """Drop the rows at positions ``gone`` and the columns no remaining row uses (the rows
        left may change places: ``self.rows`` says which is where).

        The KV of rows that finished (not cancelled ones) goes to the prefix cache.
        """
        self._keep_finished(gone)
        keep = [row for row in range(len(self.rows)) if row not in gone]
        if not keep or self.cache is None or self.mask is None:
            self.clear()
            return
        moved = kv.drop_rows(self.cache, self.mask, gone) if self.reshapable else None
        if moved is not None:  # in place; the last rows took the places of those gone
            self.mask, keep = moved
        else:
            self.cache, self.mask = kv.keep_rows(self.cache, self.mask, keep, trim=self.reshapable)
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.rows = [self.rows[row] for row in keep]
        self.lengths, self.last = self.lengths[index], self.last[index]
        self.temperature, self.top_p = self.temperature[index], self.top_p[index]

    def _keep_finished(self, gone: set[int]) -> None:
        if self.prefix is None or not self.reshapable or self.cache is None or self.mask is None:
            return
        layers = kv.layers(self.cache)
        for row in sorted(gone):
            seq = self.rows[row]
            if not seq.finished or seq.cancelled:
                continue
            columns = self.mask[row].nonzero().squeeze(1)  # the row's real tokens, in order
            # The last sampled token was never fed, so the KV ends one token short of the output.
            tokens = (seq.prompt_ids + seq.output_ids)[:columns.numel()]
            kept = [(keys[row].index_select(-2, columns), values[row].index_select(-2, columns))
                    for keys, values in layers]
            self.prefix.store(self.key, tokens, kept, replaces=seq.prefix_hit)

    def clear(self) -> None:
        """Forget every row (after they all finished, or after a failed step)."""
        self.rows = []
        self.cache = self.mask = None
        self.lengths = self.lengths[:0]
        self.last = self.last[:0]
        self.temperature, self.top_p = self.temperature[:0], self.top_p[:0]


def usable_prefix(seq: Sequence) -> int:
    """Prompt tokens of ``seq`` its prefix hit could supply: all but the last, which must run."""
    return 0 if seq.prefix_hit is None else min(seq.prefix_hit.length, len(seq.prompt_ids) - 1)


def _reused(new: Seq[Sequence]) -> list[int]:
    """Prompt tokens each row takes from the prefix cache rather than running.

    Rows run as one left-padded block of ``width`` columns (the longest uncached
    part). A row with a hit reuses all but its last ``width`` tokens, so its
    reused and run tokens meet with no padding between them; running a few
    cached tokens again costs nothing, as those columns would be padding. At
    least one token always runs: its logits give the first sampled token.
    """
    usable = [usable_prefix(seq) for seq in new]
    width = max(len(seq.prompt_ids) - use for seq, use in zip(new, usable, strict=True))
    return [max(0, len(seq.prompt_ids) - width) if use else 0
            for seq, use in zip(new, usable, strict=True)]

"""The engine thread: continuous batching over one ``DecodeBatch``.

One thread owns the model. It loops: take what arrived (when idle, wait for
the first request, then ``batch_wait_s`` more so that requests sent together
start together), admit waiting rows into the running batch (a prefill that
joins between two decode steps), run one decode step for every row, sample,
finish rows (stop token, EOS, stop string, ``max_tokens``) and hand updates to
the asyncio side with one ``call_soon_threadsafe`` per event loop per step.
The event loop therefore never waits on the model.

Commands (a weight update, loading a LoRA adapter) run in the same thread
between steps once the batch has drained; while one is pending no new row is
admitted. So every token of a response comes from one set of weights, whose
version the response reports.

Rows for a LoRA adapter are served by a merged copy of the model; a batch
holds rows of one model at a time, and the next model is the one the oldest
waiting row asks for.

Finished rows leave their KV in a prefix cache (``agentgym.serve.prefix``),
which a waiting row is looked up in when it is considered for admission, so
the prefill budget counts only the tokens that will run. Commands that change
weights clear it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from agentgym.serve.batch import (
    DecodeBatch,
    EngineFailure,
    Sequence,
    SequenceUpdate,
    Sink,
    usable_prefix,
)
from agentgym.serve.prefix import PrefixCache
from agentgym.serve.sampling import SampleOutput, make_generator, sample

__all__ = ["Limits", "Scheduler", "SchedulerStats"]

_log = logging.getLogger("agentgym.serve")

_STOP = object()


@dataclass(frozen=True, slots=True)
class Limits:
    """How much the scheduler takes on at once."""

    max_num_seqs: int = 256  # rows decoded together
    max_prefill_tokens: int = 8192  # rows x longest uncached prompt part in one prefill (at least one row)
    batch_wait_s: float = 0.002  # when idle, wait this long after a request for others
    prefix_cache_bytes: int = 0  # KV kept for prompts that continue finished rows; 0: none


@dataclass(slots=True)
class SchedulerStats:
    """Counters since start; ``max_batch_size`` is the most rows one decode step ran."""

    requests: int = 0
    choices: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    prefills: int = 0
    steps: int = 0
    max_batch_size: int = 0
    errors: int = 0
    running: int = 0
    waiting: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(slots=True)
class _Command:
    fn: Callable[[], Any]
    future: concurrent.futures.Future[Any]
    drain: bool = True  # wait until the running batch has finished


class Scheduler:
    """Owns the model thread; ``submit`` and ``call`` are safe from any thread."""

    def __init__(self, models: dict[str | None, torch.nn.Module], *, eos_ids: set[int], pad_id: int,
                 max_model_len: int, decode: Callable[[list[int], bool], str],
                 device: torch.device, limits: Limits = Limits(), seed: int = 0) -> None:
        self.models = models  # None -> the base model; other keys: LoRA adapters
        self.eos_ids = eos_ids
        self.max_model_len = max_model_len
        self.limits = limits
        self.decode_text = decode
        self.policy_version = 0
        self.stats = SchedulerStats()
        self.prefix = PrefixCache(limits.prefix_cache_bytes)
        self._batch = DecodeBatch(models[None], pad_id, device, self.prefix)
        self._batch_key: str | None = None
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting: deque[Sequence] = deque()
        self._commands: deque[_Command] = deque()
        self._admitting: list[Sequence] = []
        self._rng = torch.Generator(device=device)
        self._rng.manual_seed(seed)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------ any thread ---

    def start(self, torch_threads: int | None = None) -> None:
        """Start the engine thread (again, should it ever have died)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._run, args=(torch_threads,),
                                            name="agentgym-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the engine thread after the current step; pending requests are failed."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._inbox.put(_STOP)
            thread.join(timeout)

    def snapshot(self) -> dict[str, int]:
        """The counters, with the rows running and waiting right now."""
        self.stats.running, self.stats.waiting = len(self._batch), len(self._waiting)
        return self.stats.as_dict()

    def submit(self, sequences: list[Sequence]) -> None:
        """Queue the choices of one request."""
        self._inbox.put(sequences)

    def call(self, fn: Callable[[], Any], *, drain: bool = True) -> concurrent.futures.Future[Any]:
        """Run ``fn`` in the engine thread once the running batch has drained.

        ``drain=False``: between the next two steps instead, for what does not
        touch the rows being decoded (clearing the prefix cache).
        """
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._inbox.put(_Command(fn, future, drain))
        return future

    # ---------------------------------------------------- engine thread ---

    def _run(self, torch_threads: int | None) -> None:
        if torch_threads:
            torch.set_num_threads(torch_threads)
        with torch.inference_mode():
            while self._collect(block=self._idle()):
                self._iterate()
        self._fail_all("the server is shutting down")

    def _idle(self) -> bool:
        return not (self._batch.rows or self._waiting or self._commands)

    def _collect(self, block: bool) -> bool:
        """Move what arrived into the queues; False once asked to stop."""
        if block:
            if not self._accept(self._inbox.get()):
                return False
            if self.limits.batch_wait_s > 0:
                time.sleep(self.limits.batch_wait_s)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return True
            if not self._accept(item):
                return False

    def _accept(self, item: object) -> bool:
        if item is _STOP:
            return False
        if isinstance(item, _Command):
            if item.drain:
                self._commands.append(item)
            else:  # _accept runs in the engine thread, between steps
                self._run_command(item)
        elif isinstance(item, list):
            self._waiting.extend(item)
            self.stats.requests += 1
        return True

    def _iterate(self) -> None:
        try:
            self._drop_cancelled()
            if self._commands and not self._batch.rows:
                self._run_command(self._commands.popleft())
                return
            if not self._commands:
                self._admit()
            if self._batch.rows:
                self._step()
        except Exception as exc:  # noqa: BLE001 - the engine outlives a failed batch
            self._fail_batch(exc)

    def _run_command(self, command: _Command) -> None:
        if not command.future.set_running_or_notify_cancel():
            return
        try:
            command.future.set_result(command.fn())
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who re-raises it
            command.future.set_exception(exc)

    def _drop_cancelled(self) -> None:
        if any(seq.cancelled for seq in self._waiting):
            self._waiting = deque(seq for seq in self._waiting if not seq.cancelled)
        gone = {row for row, seq in enumerate(self._batch.rows) if seq.cancelled}
        if gone:
            self._batch.remove(gone)

    def _admit(self) -> None:
        batch = self._batch
        if not self._waiting or (batch.rows and not batch.reshapable):
            return
        if not batch.rows:
            self._batch_key = self._waiting[0].adapter
            model = self.models.get(self._batch_key)
            if model is None:  # the adapter was unloaded while these rows waited
                self._drop_waiting(self._batch_key, f"the LoRA adapter {self._batch_key!r} was unloaded")
                return
            batch.use(model, self._batch_key)
        chosen = self._choose(self.limits.max_num_seqs - len(batch))
        if not chosen:
            return
        self._admitting = chosen
        for seq in chosen:
            seq.policy_version = self.policy_version
            seq.generator = make_generator(seq.params.seed, batch.device)  # on the logits' device
            self.stats.prompt_tokens += len(seq.prompt_ids)
        start = len(batch)
        logits = batch.prefill(chosen)
        self.stats.cached_prompt_tokens += sum(seq.cached_tokens for seq in chosen)
        self._admitting = []
        self.stats.prefills += 1
        self.stats.choices += len(chosen)
        self._advance(start, chosen, logits)

    def _drop_waiting(self, adapter: str | None, message: str) -> None:
        dropped = [seq for seq in self._waiting if seq.adapter == adapter]
        self._waiting = deque(seq for seq in self._waiting if seq.adapter != adapter)
        _deliver_failure(dropped, message)

    def _choose(self, room: int) -> list[Sequence]:
        """The oldest waiting rows that fit the prefill budget, up to the first of another model.

        Stopping there lets the batch drain so that the other model's rows get
        their turn: a busy base model cannot starve a LoRA adapter.
        """
        chosen: list[Sequence] = []
        longest = 0
        for seq in self._waiting:
            if len(chosen) >= room or seq.adapter != self._batch_key:
                break
            seq.prefix_hit = self.prefix.lookup(seq.adapter, seq.prompt_ids)  # None from an empty cache
            wider = max(longest, len(seq.prompt_ids) - usable_prefix(seq))
            if chosen and wider * (len(chosen) + 1) > self.limits.max_prefill_tokens:
                break
            chosen.append(seq)
            longest = wider
        if chosen:
            taken = set(map(id, chosen))
            self._waiting = deque(seq for seq in self._waiting if id(seq) not in taken)
        return chosen

    def _step(self) -> None:
        logits = self._batch.decode()
        self.stats.steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, len(self._batch))
        self._advance(0, list(self._batch.rows), logits)

    def _advance(self, start: int, rows: list[Sequence], logits: torch.Tensor) -> None:
        """Sample a token for ``rows`` (batch positions ``start:``), finish rows, deliver."""
        batch = self._batch
        top_k = max((seq.params.logprobs or 0) for seq in rows)
        drawn = sample(logits, batch.temperature[start:], batch.top_p[start:],
                       [seq.generator for seq in rows], self._rng, top_k)
        batch.set_last(start, drawn.token_ids)
        self.stats.generated_tokens += len(rows)
        updates: list[tuple[Sequence, SequenceUpdate | EngineFailure]] = []
        finished: set[int] = set()
        for offset, seq in enumerate(rows):
            text = self._record(seq, drawn, offset)
            if seq.finished or seq.cancelled:
                finished.add(start + offset)
            if seq.sink.stream or seq.finished:
                updates.append((seq, seq.take_update(text)))
        if finished:
            batch.remove(finished)
        _deliver(updates)

    def _record(self, seq: Sequence, drawn: SampleOutput, row: int) -> str:
        """Append row ``row``'s draw to ``seq``, decide whether it is done; the text to send."""
        token = drawn.token_ids[row]
        params = seq.params
        seq.output_ids.append(token)
        seq.logprobs.append(drawn.logprobs[row])
        if params.logprobs is not None:
            top: list[tuple[int, float]] = []
            if params.logprobs and drawn.top_ids is not None and drawn.top_logprobs is not None:
                top = list(zip(drawn.top_ids[row][:params.logprobs],
                               drawn.top_logprobs[row][:params.logprobs], strict=True))
            seq.top_logprobs.append(top)
        if token in params.stop_token_ids:
            seq.finish("stop", token)
        elif token in self.eos_ids and not params.ignore_eos:
            seq.finish("stop")
        text_ids = seq.output_ids[:-1] if seq.finished else seq.output_ids  # a stop token is not text
        delta = ""
        if seq.tracker is not None:
            delta, hit = seq.tracker.feed(text_ids)
            if hit is not None and not seq.finished:
                seq.finish("stop", hit)
        if not seq.finished and (len(seq.output_ids) >= params.max_tokens
                                 or len(seq.prompt_ids) + len(seq.output_ids) >= self.max_model_len):
            seq.finish("length")
        if not seq.sink.stream:  # a non-streamed choice gets its whole text once, at the end
            if not seq.finished:
                return ""
            if seq.tracker is not None:
                return seq.tracker.text
            return self.decode_text(text_ids, params.skip_special_tokens)
        if seq.tracker is not None:
            return delta + (seq.tracker.flush() if seq.finished else "")
        return ""

    def _fail_batch(self, exc: Exception) -> None:
        _log.exception("a generation batch failed; its requests get a 500", exc_info=exc)
        self.stats.errors += 1
        failed = self._batch.rows + self._admitting
        self._batch.clear()
        self._admitting = []
        _deliver_failure(failed, f"generation failed: {type(exc).__name__}: {exc}")

    def _fail_all(self, message: str) -> None:
        _deliver_failure(self._batch.rows + list(self._waiting), message)
        self._batch.clear()
        self._waiting.clear()
        for command in self._commands:
            if command.future.set_running_or_notify_cancel():
                command.future.set_exception(RuntimeError(message))
        self._commands.clear()


def _deliver(updates: list[tuple[Sequence, SequenceUpdate | EngineFailure]]) -> None:
    """Hand updates to their event loops: one wake-up per loop."""
    by_loop: dict[Any, list[tuple[Sink, SequenceUpdate | EngineFailure]]] = {}  # loop -> items
    for seq, update in updates:
        by_loop.setdefault(seq.sink.loop, []).append((seq.sink, update))
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_put_all, items)
        except RuntimeError:  # the loop is closed: its clients are gone
            for sink, _ in items:
                _log.debug("dropped an update for a closed event loop %r", sink)


def _deliver_failure(sequences: list[Sequence], message: str) -> None:
    seen: set[int] = set()
    items: list[tuple[Sequence, SequenceUpdate | EngineFailure]] = []
    for seq in sequences:
        if id(seq.sink) not in seen:
            seen.add(id(seq.sink))
            items.append((seq, EngineFailure(message)))
    _deliver(items)


def _put_all(items: list[tuple[Sink, SequenceUpdate | EngineFailure]]) -> None:
    for sink, update in items:
        sink.queue.put_nowait(update)

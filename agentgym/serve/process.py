"""The engine in a child process: the model and its scheduler there, HTTP and the tokenizer here.

    engine = EngineProcess(EngineConfig("tiny"))   # the child loads the model meanwhile
    engine.start()                                 # returns once it has
    outputs = await engine.generate(engine.encode("Hello"), SamplingParams(max_tokens=8))

In one process the HTTP loop (parsing, the chat template, tokenizing, building
responses) and the model's Python share one GIL, so neither ever has a core to
itself; vLLM splits its API server from its engine core for the same reason. The
child runs an ordinary :class:`~agentgym.serve.engine.Engine`; this side checks
requests with the same code, then forwards them.

The two talk over a multiprocessing pipe, in tuples:

- to the child: ``("submit", rid, prompts, params, n, adapter, stream)``,
  ``("cancel", rid)``, ``("call", cid, method, args, kwargs)``, ``("stop",)``;
- to the parent: ``("ready", info)`` or ``("failed", kind, message)`` once, then
  ``("updates", [(rid, update), ...])`` once a decode step and ``("done", cid, value)``
  or ``("error", cid, kind, message, param)`` for a call.

If the child dies, every request in flight fails with a line saying so, new ones
are refused, and ``/health`` answers 503.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import multiprocessing
import signal
import threading
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from agentgym import errors
from agentgym.errors import ServeError
from agentgym.serve.batch import EngineFailure, SequenceUpdate, Sink
from agentgym.serve.engine import (
    BaseEngine,
    Engine,
    EngineConfig,
    Generation,
    WeightUpdate,
    cancel_sequences,
)
from agentgym.serve.sampling import SamplingParams

__all__ = ["EngineProcess"]

_log = logging.getLogger("agentgym.serve")
_STOP_TIMEOUT_S = 10.0


@dataclass(slots=True)
class _Open:
    """A request in flight, on the parent's side."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[SequenceUpdate | EngineFailure]
    choices: int  # not yet finished


class EngineProcess(BaseEngine):
    """An :class:`Engine` in a child process, behind the same interface."""

    def __init__(self, config: EngineConfig, *, startup_timeout: float = 600.0) -> None:
        """Start the child, which loads the model while this process goes on; :meth:`start` waits for it."""
        from agentgym.models import resolve_model

        model_path = resolve_model(config.model)  # a named model is built here, once, not in the child
        context = multiprocessing.get_context("spawn")  # torch's threads do not survive a fork
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(target=_child_main, args=(config, model_path, child_conn),
                                        name="agentgym-engine", daemon=True)
        self._process.start()
        child_conn.close()
        self._startup_timeout = startup_timeout
        self._lock = threading.Lock()  # guards the two tables and the pipe's sending end
        self._open: dict[int, _Open] = {}
        self._calls: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = itertools.count()
        self._failure: str | None = None
        self._reader: threading.Thread | None = None
        try:
            super().__init__(config, model_path)  # the tokenizer, while the child loads the model
        except BaseException:
            self._process.kill()
            raise

    def _wait_ready(self, timeout: float) -> dict[str, int]:
        if not self._conn.poll(timeout):
            self._process.kill()
            raise ServeError(f"the engine process did not load the model within {timeout:g} s.")
        try:
            message = self._conn.recv()
        except EOFError:
            self._process.join(_STOP_TIMEOUT_S)
            raise ServeError(f"the engine process exited (code {self._process.exitcode}) while loading the "
                             "model; its error is above.") from None
        if message[0] == "failed":
            self._process.join(_STOP_TIMEOUT_S)
            raise _rebuild(message[1], message[2], None)
        return dict(message[1])

    # ---------------------------------------------------------- lifecycle ---

    def start(self) -> None:
        """Wait until the child has loaded the model (idempotent); raise its error if it could not."""
        with self._lock:
            if self._reader is not None:
                return
            if self._failure is not None:
                raise ServeError(self._failure)
            try:
                info = self._wait_ready(self._startup_timeout)
            except Exception as exc:
                self._failure = str(exc)
                raise
            self.vocab_size, self.max_model_len = info["vocab_size"], info["max_model_len"]
            self._reader = threading.Thread(target=self._read, name="agentgym-engine-reader", daemon=True)
            self._reader.start()

    def close(self) -> None:
        """Ask the child to stop (requests in flight fail), then wait for it."""
        try:
            self._send(("stop",))
        except ServeError:
            pass  # already gone
        self._process.join(_STOP_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(_STOP_TIMEOUT_S)
        self._conn.close()

    @property
    def alive(self) -> bool:
        return self._failure is None and self._process.is_alive()

    # ------------------------------------------------------- to the child ---

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            if self._failure is not None:
                raise ServeError(self._failure)
            try:
                self._conn.send(message)
            except (OSError, ValueError) as exc:  # a broken pipe, or closed here
                raise ServeError(f"the engine process is gone: {exc}") from exc

    def submit(self, prompts: Seq[Seq[int]], params: SamplingParams, *, n: int = 1,
               adapter: str | None = None, stream: bool = False) -> Generation:
        self.start()
        self.check_request(prompts, params, n, adapter)
        queue: asyncio.Queue[SequenceUpdate | EngineFailure] = asyncio.Queue()
        rid = next(self._ids)
        choices = len(prompts) * n
        with self._lock:
            self._open[rid] = _Open(asyncio.get_running_loop(), queue, choices)
        try:
            self._send(("submit", rid, [list(prompt) for prompt in prompts], params, n, adapter, stream))
        except ServeError:
            with self._lock:
                self._open.pop(rid, None)
            raise
        return Generation(choices, queue, lambda: self._cancel(rid))

    def _cancel(self, rid: int) -> None:
        with self._lock:
            if self._open.pop(rid, None) is None:
                return
        try:
            self._send(("cancel", rid))
        except ServeError:
            pass  # the child is gone, and the request with it

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.start()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        cid = next(self._ids)
        with self._lock:
            self._calls[cid] = future
        try:
            self._send(("call", cid, method, args, kwargs))
        except ServeError:
            with self._lock:
                self._calls.pop(cid, None)
            raise
        return await asyncio.wrap_future(future)

    async def read_stats(self) -> dict[str, int]:
        return dict(await self._call("read_stats"))

    async def reset_prefix_cache(self) -> None:
        await self._call("reset_prefix_cache")

    async def prompt_logprobs(self, prompts: Seq[Seq[int]], k: int, *, adapter: str | None = None
                              ) -> list[list[dict[int, tuple[float, int]] | None]]:
        return list(await self._call("prompt_logprobs", [list(prompt) for prompt in prompts], k, adapter=adapter))

    async def update_weights(self, weights_path: str, version: int | None = None) -> WeightUpdate:
        self.check_version(version)
        done: WeightUpdate = await self._call("update_weights", weights_path, version)
        return done

    async def load_lora(self, name: str, path: str) -> None:
        self.check_new_lora(name)
        await self._call("load_lora", name, path)
        self._lora_paths[name] = path

    async def unload_lora(self, name: str) -> None:
        self.check_loaded_lora(name)
        await self._call("unload_lora", name)
        self._lora_paths.pop(name, None)

    # ----------------------------------------------------- from the child ---

    def _read(self) -> None:
        """The reader thread: hand each message to whoever waits for it, until the pipe closes."""
        try:
            while True:
                message = self._conn.recv()
                if message[0] == "updates":
                    self._deliver(message[1])
                else:
                    self._settle(message)
        except (EOFError, OSError):
            pass
        self._process.join(_STOP_TIMEOUT_S)
        self._fail_everything(f"the engine process exited (code {self._process.exitcode}); restart the server.")

    def _deliver(self, items: list[tuple[int, SequenceUpdate | EngineFailure]]) -> None:
        arrived: list[tuple[_Open, SequenceUpdate | EngineFailure]] = []
        with self._lock:
            for rid, update in items:
                entry = self._open.get(rid)
                if entry is None:  # cancelled here while the child was still sending
                    continue
                if isinstance(update, EngineFailure) or update.finish_reason is not None:
                    entry.choices -= 1
                    if isinstance(update, EngineFailure) or entry.choices == 0:
                        del self._open[rid]
                arrived.append((entry, update))
        _hand_over(arrived)

    def _settle(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            future = self._calls.pop(message[1], None)
        if future is None:
            return
        if message[0] == "done":
            future.set_result(message[2])
        else:
            future.set_exception(_rebuild(*message[2:]))

    def _fail_everything(self, reason: str) -> None:
        with self._lock:
            self._failure = reason
            opened, self._open = self._open, {}
            calls, self._calls = self._calls, {}
        _hand_over([(entry, EngineFailure(reason)) for entry in opened.values()])
        for future in calls.values():
            future.set_exception(ServeError(reason))
        if opened or calls:
            _log.error("%s", reason)


def _hand_over(arrived: list[tuple[_Open, SequenceUpdate | EngineFailure]]) -> None:
    """Put each update in its request's queue, from the reader thread: one wake-up per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[Any], Any]]] = {}
    for entry, update in arrived:
        by_loop.setdefault(entry.loop, []).append((entry.queue, update))
    for loop, puts in by_loop.items():
        try:
            loop.call_soon_threadsafe(_put_all, puts)
        except RuntimeError:  # that loop is closed: its clients are gone
            pass


def _put_all(puts: list[tuple[asyncio.Queue[Any], Any]]) -> None:
    for queue, item in puts:
        queue.put_nowait(item)


def _rebuild(kind: str, message: str, param: str | None) -> Exception:
    """The child's exception, as its own class where it is one of agentgym's, else a ServeError."""
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, ServeError):
        return cls(message, param=param)
    if isinstance(cls, type) and issubclass(cls, errors.AgentGymError):
        return cls(message)
    return ServeError(f"{kind}: {message}")


# ------------------------------------------------------------------- child ---

def _child_main(config: EngineConfig, model_path: str, conn: Connection) -> None:
    """The child's program: load the engine, say so, serve the pipe until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
    try:
        engine = Engine(dataclasses.replace(config, model=model_path))
    except Exception as exc:  # noqa: BLE001 - sent to the parent, which raises it
        conn.send(("failed", type(exc).__name__, str(exc)))
        return
    conn.send(("ready", {"vocab_size": engine.vocab_size, "max_model_len": engine.max_model_len}))
    asyncio.run(_Child(engine, conn).run())


class _Outbox:
    """A request's sink queue in the child: updates are batched into one message a step."""

    def __init__(self, child: _Child, rid: int) -> None:
        self.child, self.rid = child, rid

    def put_nowait(self, update: SequenceUpdate | EngineFailure) -> None:
        self.child.post(self.rid, update)


class _Child:
    """The child's event loop: requests in, one message of updates out after each step."""

    def __init__(self, engine: Engine, conn: Connection) -> None:
        self.engine = engine
        self.conn = conn
        self.open: dict[int, list[Any]] = {}  # rid -> its sequences (to cancel them)
        self.outbox: list[tuple[int, SequenceUpdate | EngineFailure]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        stopped: asyncio.Future[None] = self.loop.create_future()
        threading.Thread(target=self._read, args=(stopped,), name="agentgym-engine-pipe", daemon=True).start()
        self.engine.start()
        await stopped
        self.engine.close()

    def _read(self, stopped: asyncio.Future[None]) -> None:
        assert self.loop is not None
        try:
            while (message := self.conn.recv())[0] != "stop":
                self.loop.call_soon_threadsafe(self._handle, message)
        except (EOFError, OSError):
            pass  # the parent is gone
        self.loop.call_soon_threadsafe(lambda: stopped.done() or stopped.set_result(None))

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "submit":
            rid, prompts, params, n, adapter, stream = message[1:]
            assert self.loop is not None
            try:
                self.open[rid] = self.engine.enqueue(prompts, params, n, adapter,
                                                     Sink(self.loop, _Outbox(self, rid), stream))
            except Exception as exc:  # noqa: BLE001 - the request fails, not the engine
                self.post(rid, EngineFailure(f"the engine could not take the request: {exc}"))
        elif kind == "cancel":
            cancel_sequences(self.open.pop(message[1], []))
        elif kind == "call":
            task = asyncio.ensure_future(self._call(*message[1:]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def post(self, rid: int, update: SequenceUpdate | EngineFailure) -> None:
        if isinstance(update, EngineFailure) or update.finish_reason is not None:
            sequences = self.open.get(rid)
            if isinstance(update, EngineFailure) or not any(seq.finish_reason is None for seq in sequences or ()):
                self.open.pop(rid, None)
        if not self.outbox:
            assert self.loop is not None
            self.loop.call_soon(self._flush)  # after the rest of this step's updates
        self.outbox.append((rid, update))

    def _flush(self) -> None:
        batch, self.outbox = self.outbox, []
        self._send(("updates", batch))

    async def _call(self, cid: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            value = await getattr(self.engine, method)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - raised again in the parent
            self._send(("error", cid, type(exc).__name__, str(getattr(exc, "message", exc)),
                        getattr(exc, "param", None)))
        else:
            self._send(("done", cid, value))

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self.conn.send(message)
        except OSError:
            pass  # the parent is gone; the reader thread stops us

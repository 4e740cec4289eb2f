"""The server a run plays against, and the weight push into it: one for every trainer and backend.

With no ``server.base_url`` the built-in server is started on the run's model (on a
loopback port, with a random API key only this run knows); with one, that server is
used and ``server.engine`` says how weights reach it (the built-in server's endpoint,
or vLLM's reload). Offline runs (``rollout.trajectories``) start nothing.

    with Serving(config, learner.engine.tokenizer) as serving:
        rows = serving.rollout(step).rows
        serving.push(learner)                # after each step
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

from agentgym.trainers.loop.rollouts import StepRollout, play_step

__all__ = ["Serving"]


class Serving:
    """Started on rank 0 only; the other ranks take part in :meth:`push`'s gather and nothing else."""

    def __init__(self, config: Any, tokenizer: Any, model_path: str, *, main: bool = True) -> None:
        self.config = config
        self.main = main
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.renderer: Any = None
        self.base_url = config.server.base_url
        self.api_key = config.server.api_key
        self.model_name = config.model.model
        self._sync: Any = None
        #: the version of the weights the server has (the last push's; the start model's is 0)
        self.served_version = 0
        self._ahead: dict[int, Future[StepRollout]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._stack = contextlib.ExitStack()

    @property
    def online(self) -> bool:
        return self.config.rollout.trajectories is None

    @property
    def pushes(self) -> bool:
        """Whether :meth:`push` sends weights anywhere (online, with ``server.sync_weights``)."""
        return self.online and self.config.server.sync_weights

    def __enter__(self) -> Self:
        if not self.main or not self.online:
            return self
        from agentgym.rollout.chat import ChatRenderer

        self.renderer = ChatRenderer(self.tokenizer)  # the learner's tokenizer, not loaded again
        if self.base_url is None:
            from agentgym.serve.launch import BuiltinServer

            server = self._stack.enter_context(BuiltinServer(
                self.model_path, served_model_name=self.config.model.model,
                max_model_len=self.config.rollout.max_context_tokens))
            self.base_url, self.model_name = server.base_url, server.model_name
            self.api_key = server.api_key or "EMPTY"
        from agentgym.rollout.tokenizers import check_server_tokenizer

        # Rows are rendered in the learner's tokenizer and sampled in the server's: they must agree.
        check_server_tokenizer(self.base_url, self.tokenizer, model_name=self.model_name, api_key=self.api_key,
                               model=self.config.model.model)
        if self.config.server.sync_weights:
            from agentgym.trainers.loop.sync import make_weight_sync

            self._sync = self._stack.enter_context(contextlib.closing(make_weight_sync(
                self.config.server.engine, self.base_url, model_name=self.model_name, api_key=self.api_key,
                folder=Path(self.config.run.out) / "sync")))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def rollout(self, step: int) -> StepRollout:
        """``step``'s episodes (rank 0): played now, or, when :meth:`start` began them, waited for
        (``stats["time/waiting"]``: how long)."""
        future = self._ahead.pop(step, None)
        if future is None:
            return self._play(step)
        started = time.perf_counter()
        rollout = future.result()
        rollout.stats["time/waiting"] = time.perf_counter() - started
        return rollout

    def start_ahead(self, step: int, ahead: int, steps: int) -> None:
        """Have the steps after ``step``, up to ``ahead`` of them (and before ``steps``), played or playing."""
        for later in range(step + 1, min(step + ahead, steps - 1) + 1):
            if later not in self._ahead:
                self.start(later)

    def start(self, step: int) -> None:
        """Begin playing ``step``'s episodes in a thread, against the weights the server has now.

        The server applies a weight push between batches, so each turn is sampled by one version
        and its logprobs are that version's: the importance correction uses them as they are.
        """
        if self._pool is None:
            # Closed before the server stops: an episode in flight finishes (or fails) first.
            self._pool = self._stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="agentgym-ahead"))
        self._ahead[step] = self._pool.submit(self._play, step)

    def refill(self, step: int, round: int) -> StepRollout:
        """Extra round ``round`` (1, 2, ...) of ``step``'s groups, played now (dynamic sampling)."""
        return self._play(step, round)

    def _play(self, step: int, round: int = 0) -> StepRollout:
        return asyncio.run(play_step(self.config, step, self.base_url, self.model_name, self.renderer,
                                     api_key=self.api_key, weights_version=lambda: self.served_version,
                                     round=round))

    def push(self, learner: Any) -> float:
        """Send the learner's weights to the server; seconds taken (0 when nothing is synced).

        Every rank must call it: gathering sharded weights is a collective.
        """
        if not self.pushes:
            return 0.0
        started = time.perf_counter()
        weights = learner.weights()
        if self._sync is not None:
            self.served_version = self._sync.push(weights, version=learner.version).version
        return time.perf_counter() - started

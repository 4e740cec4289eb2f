"""The teacher of a distillation run: loaded in this process, or behind a server.

Both give, for a micro-batch of the student's sequences, a :class:`TeacherBatch`: the
teacher's logprob of each completion token, and (offline) its top tokens or its whole
distribution at each position.

- :class:`InProcessTeacher` (``distill.teacher``): the engine keeps it, frozen, where it keeps
  a KL reference (sharded like the student under FSDP), and computes its log-softmax.
- :class:`ServerTeacher` (``distill.teacher_url``): any OpenAI-compatible server that returns
  vLLM's ``prompt_logprobs`` (``agentgym serve``, vLLM). Each sequence, prompt and completion,
  is sent as a token-id prompt with ``max_tokens=1``; the logprobs of its own tokens come back
  (temperature 1: vLLM computes prompt logprobs from the raw logits, so does the built-in
  server). A teacher too big for the trainer never has to fit in it.

Teacher and student must share a tokenizer: a mismatch is a :class:`ConfigError` at start
(the in-process teacher's vocabulary is compared; the server is asked to tokenize a probe).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence
from agentgym.trainers.losses.distillation import teacher_top_k
from agentgym.trainers.learners.settings import DistillSettings

__all__ = ["SERVER_TOP_K", "InProcessTeacher", "ServerTeacher", "TeacherBatch", "make_teacher"]

#: text the server teacher is asked to tokenize: chat markup, words, digits, punctuation
_PROBE = "Hello, world! Push the box: <answer>Up</answer> 0123456789 #@$.\n  end"
#: top k a server teacher gives when ``teacher_top_k`` is none (vLLM's default ``max_logprobs``)
SERVER_TOP_K = 20


@dataclass
class TeacherBatch:
    """What the teacher says about one micro-batch ([S, T] as the batch's completion tokens)."""

    token_logprobs: torch.Tensor
    """[S, T] the teacher's logprob of each completion token"""
    top_ids: torch.Tensor | None = None
    """[S, T, K] its top tokens at each position (offline, top k)"""
    top_logprobs: torch.Tensor | None = None
    """[S, T, K] their logprobs"""
    full: torch.Tensor | None = None
    """[S, T, V] its whole log-softmax (offline, the teacher in this process, no top k)"""


class InProcessTeacher:
    """A teacher model loaded beside the student (see the module's docstring)."""

    def __init__(self, name: str, engine: Engine, top_k: int | None) -> None:
        from transformers import AutoConfig, AutoTokenizer

        from agentgym.models import resolve_model

        path = resolve_model(name)
        theirs = AutoTokenizer.from_pretrained(path).get_vocab()
        ours = engine.tokenizer.get_vocab()
        if theirs != ours:
            raise ConfigError(f"distill.teacher {name!r} does not share the student's tokenizer ({len(theirs)} "
                              f"tokens against {len(ours)}, {_differing(ours, theirs)} differ); distil from a "
                              "teacher of the same tokenizer.")
        widths = AutoConfig.from_pretrained(path).vocab_size, AutoConfig.from_pretrained(engine.model_path).vocab_size
        if widths[0] != widths[1]:
            raise ConfigError(f"distill.teacher {name!r} scores {widths[0]} tokens, the student {widths[1]}: the "
                              "same tokenizer but other output layers; distil between models of one vocabulary.")
        engine.keep_reference(path)
        self.engine = engine
        self.top_k = top_k

    def prepare(self, sequences: Sequence[TrainSequence], *, top_k: int | None) -> float:
        """Nothing to fetch ahead: the teacher runs with each micro-batch. Seconds spent: 0."""
        del sequences, top_k
        return 0.0

    def score(self, group: Sequence[TrainSequence], batch: MicroBatch, *, full: bool, top_k: int | None
              ) -> TeacherBatch:
        distribution = self.engine.distributions(batch, reference=True)
        tokens = distribution.gather(-1, batch.target_ids.to(distribution.device).unsqueeze(-1)).squeeze(-1)
        if not full:
            return TeacherBatch(token_logprobs=tokens)
        if top_k is None:
            return TeacherBatch(token_logprobs=tokens, full=distribution)
        ids, values = teacher_top_k(distribution, top_k)
        return TeacherBatch(token_logprobs=tokens, top_ids=ids, top_logprobs=values)


@dataclass
class _Scores:
    """The server's answer for one sequence's completion tokens."""

    token_logprobs: list[float]
    top_ids: list[list[int]]
    top_logprobs: list[list[float]]


class ServerTeacher:
    """A teacher behind an OpenAI-compatible server (see the module's docstring)."""

    def __init__(self, settings: DistillSettings, tokenizer: Any, timeout: float = 300.0) -> None:
        import openai

        assert settings.teacher_url is not None
        self.url = settings.teacher_url
        self.api_key = settings.teacher_api_key
        self.concurrency = settings.teacher_concurrency
        self.timeout = timeout
        self._scores: dict[int, _Scores] = {}
        try:
            with openai.OpenAI(base_url=self.url, api_key=self.api_key, max_retries=0, timeout=60.0) as client:
                self.model = settings.teacher_model or client.models.list().data[0].id
                self._check(client, tokenizer)
        except (openai.APIError, IndexError) as exc:
            raise ConfigError(f"distill.teacher_url {self.url!r} did not answer as an OpenAI-compatible server "
                              f"with a model ({type(exc).__name__}: {exc}); start the teacher's server "
                              "(agentgym serve, or vLLM) and pass its URL ending in /v1.") from None

    def _check(self, client: Any, tokenizer: Any) -> None:
        """One probe: the server tokenizes as the student does, and it returns prompt logprobs."""
        body = client.completions.create(model=self.model, prompt=_PROBE, max_tokens=1, temperature=0,
                                         extra_body={"return_token_ids": True, "prompt_logprobs": 0}).model_dump()
        choice = body["choices"][0]
        ours = list(tokenizer.encode(_PROBE))
        if choice.get("prompt_token_ids") != ours:
            raise ConfigError(f"The teacher at {self.url} does not share the student's tokenizer: it tokenizes a "
                              f"probe as {choice.get('prompt_token_ids')!r:.80}, the student as {ours!r:.80}; "
                              "distil from a teacher of the same tokenizer.")
        if not choice.get("prompt_logprobs"):
            raise ConfigError(f"The teacher at {self.url} returns no prompt_logprobs (vLLM's extension of "
                              "/v1/completions); serve it with agentgym serve or vLLM.")

    def prepare(self, sequences: Sequence[TrainSequence], *, top_k: int | None) -> float:
        """Ask the server about every sequence of this rank's step, concurrently; seconds taken."""
        started = time.perf_counter()
        answers = asyncio.run(self._score_all(sequences, top_k or 0))
        self._scores = {id(sequence): answer for sequence, answer in zip(sequences, answers)}
        return time.perf_counter() - started

    async def _score_all(self, sequences: Sequence[TrainSequence], k: int) -> list[_Scores]:
        import openai

        limit = asyncio.Semaphore(self.concurrency)
        async with openai.AsyncOpenAI(base_url=self.url, api_key=self.api_key, max_retries=2,
                                      timeout=self.timeout) as client:

            async def one(sequence: TrainSequence) -> _Scores:
                async with limit:
                    response = await client.completions.create(
                        model=self.model, prompt=list(sequence.input_ids), max_tokens=1, temperature=0,
                        extra_body={"prompt_logprobs": k})
                return _parse(response.model_dump()["choices"][0].get("prompt_logprobs"), sequence, k, self.url)

            try:
                return list(await asyncio.gather(*(one(sequence) for sequence in sequences)))
            except openai.BadRequestError as exc:
                raise ConfigError(f"The teacher at {self.url} refused a row: {exc.message}. Its context must hold "
                                  "rollout.max_context_tokens + 1 tokens; teacher_top_k at most what it serves."
                                  ) from None

    def score(self, group: Sequence[TrainSequence], batch: MicroBatch, *, full: bool, top_k: int | None
              ) -> TeacherBatch:
        del full  # a server gives its top k, never its whole distribution
        shape = tuple(batch.target_ids.shape)
        tokens = torch.zeros(shape)
        k = top_k or 0
        ids = torch.zeros((*shape, k), dtype=torch.long)
        values = torch.full((*shape, k), -30.0)  # padding positions: a negligible mass, masked anyway
        for s, sequence in enumerate(group):
            scores = self._scores.get(id(sequence))
            if scores is None:  # the filler of an idle rank's pass
                continue
            n = len(scores.token_logprobs)
            tokens[s, :n] = torch.tensor(scores.token_logprobs)
            if k:
                ids[s, :n] = torch.tensor(scores.top_ids, dtype=torch.long)
                values[s, :n] = torch.tensor(scores.top_logprobs)
        device = batch.target_ids.device
        if not k:
            return TeacherBatch(token_logprobs=tokens.to(device))
        return TeacherBatch(token_logprobs=tokens.to(device), top_ids=ids.to(device), top_logprobs=values.to(device))


def _parse(prompt_logprobs: Any, sequence: TrainSequence, k: int, url: str) -> _Scores:
    """The completion tokens' entries of vLLM's ``prompt_logprobs`` (one dict per prompt token, None
    first; keys are token ids, as strings in JSON; the token itself and the top ``k``)."""
    if not isinstance(prompt_logprobs, list) or len(prompt_logprobs) != len(sequence.input_ids):
        raise ConfigError(f"The teacher at {url} answered without prompt_logprobs for every prompt token; "
                          "serve it with agentgym serve or vLLM.")
    scores = _Scores([], [], [])
    for position in range(sequence.prompt_length, len(sequence.input_ids)):
        entry = {int(token): float(value["logprob"]) for token, value in prompt_logprobs[position].items()}
        scores.token_logprobs.append(max(entry[sequence.input_ids[position]], -9999.0))
        if k:
            top = sorted(entry.items(), key=lambda item: -item[1])[:k]
            scores.top_ids.append([token for token, _ in top])
            scores.top_logprobs.append([value for _, value in top])
    return scores


def _differing(ours: dict[str, int], theirs: dict[str, int]) -> int:
    return sum(ours.get(token) != index for token, index in theirs.items()) + len(set(ours) - set(theirs))


def make_teacher(settings: DistillSettings, engine: Engine) -> InProcessTeacher | ServerTeacher:
    """The teacher ``settings`` name; a ConfigError when there is none or it does not fit the student."""
    if settings.teacher is not None:
        return InProcessTeacher(settings.teacher, engine, settings.teacher_top_k)
    if settings.teacher_url is not None:
        return ServerTeacher(settings, engine.tokenizer)
    raise ConfigError("--trainer distill needs a teacher: -s teacher=MODEL (loaded here) or "
                      "-s teacher_url=http://HOST:PORT/v1 (a server that returns prompt_logprobs).")

"""The built-in generation engine: a transformers causal LM behind a batching scheduler.

    engine = Engine(EngineConfig("tiny"))
    engine.start()
    outputs = await engine.generate(engine.encode("Hello"), SamplingParams(max_tokens=8))

Concurrent requests are decoded together (continuous batching: a request
joins the running batch between two decode steps, see
``agentgym.serve.scheduler``); the model runs in one engine thread, never on
the event loop. The engine also owns the tokenizer (prompts, chat template,
detokenizing), the context-length checks, weight updates (with the policy
version they bump) and LoRA adapters. ``BaseEngine`` is what the HTTP side
uses; ``agentgym serve --engine-process`` puts an ``Engine`` in a child
process behind an ``EngineProcess`` (``agentgym.serve.process``) with that
same interface.

Thread settings: the engine thread sets ``torch.set_num_threads`` only when
``EngineConfig.torch_threads`` asks for it, because the setting is
process-wide; ``agentgym serve`` does ask.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import torch

from agentgym.errors import (
    ConfigError,
    InvalidRequestError,
    MissingDependencyError,
    ServeError,
    UnsupportedError,
)
from agentgym.serve import linear
from agentgym.serve.batch import EngineFailure, Sequence, SequenceUpdate, Sink
from agentgym.serve.memory import release_free_memory
from agentgym.serve.sampling import SamplingParams
from agentgym.serve.scheduler import Limits, Scheduler
from agentgym.serve.text import TextTracker
from agentgym.serve.weights import (
    check_weights,
    load_weights,
    merged_lora_model,
    peft_available,
    read_safetensors,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

__all__ = ["BaseEngine", "Engine", "EngineConfig", "Generation", "WeightUpdate", "cancel_sequences", "resolve_device"]


def resolve_device(choice: str) -> torch.device:
    """``auto`` (the first GPU if torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.

    The trainers resolve their ``device`` setting here too, so "auto" means the same
    thing for a trainer and the built-in server it starts.
    """
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(choice)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {choice!r}.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {choice!r} was asked for but torch sees no GPU; use cpu or auto.")
    return device

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_MAX_N = 128  # choices per request


@dataclass(frozen=True)
class EngineConfig:
    """How the engine loads the model and batches requests."""

    model: str
    """A local Hugging Face folder, a hub id, or ``tiny`` / ``tiny-<hidden>x<layers>``."""
    max_model_len: int | None = None
    """Prompt + completion tokens allowed per request; default: the model's max positions."""
    dtype: str = "float32"
    """float32, bfloat16 or float16 (float32 on the CPU: the others are slow there)."""
    device: str = "auto"
    """Torch device of the model: auto (the GPU when one is visible), cpu, cuda or cuda:N."""
    max_num_seqs: int = 256
    """Most choices decoded together."""
    max_prefill_tokens: int = 8192
    """Most (rows x longest prompt) in one prefill; a longer prompt still runs alone."""
    batch_wait_ms: float = 2.0
    """When idle, wait this long after a request so that requests sent together start together."""
    torch_threads: int | None = None
    """Set torch's (process-wide) thread count in the engine thread; None leaves it alone."""
    seed: int = 0
    """Seed of the sampler for requests that give no seed."""
    prefix_cache_mib: int = 1024
    """Memory for the KV of finished requests, reused by prompts that continue them (0: off)."""
    onednn_linear: bool = True
    """On the CPU, run the linear layers on oneDNN (about 2x faster; the weights' memory twice)."""

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}.")
        resolve_device(self.device)  # a bad name fails here, before the model loads
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be at least 2, got {self.max_model_len}.")
        if self.max_num_seqs < 1 or self.max_prefill_tokens < 1 or self.batch_wait_ms < 0:
            raise ConfigError("max_num_seqs and max_prefill_tokens must be positive and "
                              "batch_wait_ms not negative.")
        if self.prefix_cache_mib < 0:
            raise ConfigError(f"prefix_cache_mib must not be negative (0 turns the cache off), "
                              f"got {self.prefix_cache_mib}.")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ConfigError(f"torch_threads must be at least 1, got {self.torch_threads}.")


@dataclass(frozen=True, slots=True)
class WeightUpdate:
    """What ``update_weights`` did."""

    policy_version: int
    tensors: int
    seconds: float


class Generation:
    """The choices of one request in flight; read them with ``updates()`` or ``result()``."""

    def __init__(self, choices: int, queue: asyncio.Queue[SequenceUpdate | EngineFailure],
                 cancel: Callable[[], None]) -> None:
        self._queue = queue
        self._open = choices
        self._cancel = cancel

    async def updates(self) -> AsyncIterator[SequenceUpdate]:
        """Updates as they come (streamed choices: every step; others: once, at the end).

        Leaving early (the client went away) cancels the choices still running.
        """
        try:
            while self._open:
                item = await self._queue.get()
                if isinstance(item, EngineFailure):
                    raise ServeError(item.message)
                if item.finish_reason is not None:
                    self._open -= 1
                yield item
        finally:
            if self._open:
                self.cancel()

    async def result(self) -> list[SequenceUpdate]:
        """The finished choices, by index (for a request submitted with ``stream=False``)."""
        done = [update async for update in self.updates() if update.finish_reason is not None]
        return sorted(done, key=lambda update: update.index)

    def cancel(self) -> None:
        """Stop generating (the engine drops the rows before its next step)."""
        self._cancel()


class BaseEngine(ABC):
    """What the HTTP side needs of an engine: the tokenizer, the request checks, and (in the
    subclasses) generation, weights and adapters.

    :class:`Engine` runs the model in a thread of this process; ``EngineProcess``
    (``agentgym.serve.process``) in a child process, so that the HTTP loop and the
    tokenizer never hold the GIL the model's Python needs.
    """

    #: token ids go from 0 to this less one (the model's embedding rows)
    vocab_size: int
    #: prompt + completion tokens a request may hold
    max_model_len: int

    def __init__(self, config: EngineConfig, model_path: str) -> None:
        from transformers import AutoTokenizer

        self.config = config
        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self._lora_paths: dict[str, str] = {}
        self._token_text: dict[int, str] = {}
        # No token covers more characters than its vocabulary entry (byte-level entries spell
        # one character per byte): a text longer than this many tokens' worth cannot fit.
        self.max_token_chars = max((len(entry) for entry in self.tokenizer.get_vocab()), default=1)

    # ---------------------------------------------------------- lifecycle ---

    @abstractmethod
    def start(self) -> None:
        """Start generating (idempotent)."""

    @abstractmethod
    def close(self) -> None:
        """Stop; requests still running get an error."""

    @property
    @abstractmethod
    def alive(self) -> bool:
        """Whether requests can be served (False once the engine died)."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abstractmethod
    async def read_stats(self) -> dict[str, int]:
        """Counters: requests, tokens (``cached_prompt_tokens``: prefilled from the prefix
        cache), steps, ``max_batch_size``, running, waiting, version."""

    @abstractmethod
    async def reset_prefix_cache(self) -> None:
        """Forget the stored KV (requests running go on; they hold their own) and hand the
        memory it held back to the operating system."""

    # --------------------------------------------------------------- text ---

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``."""
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def apply_chat_template(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                            continue_final_message: bool = False,
                            template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """Token ids of a conversation rendered with the model's chat template."""
        if add_generation_prompt and continue_final_message:
            raise InvalidRequestError(
                "add_generation_prompt and continue_final_message cannot both be true.",
                param="continue_final_message")
        from jinja2 import TemplateError

        try:
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, **(template_kwargs or {}))
        except (ValueError, TypeError, KeyError, TemplateError) as exc:  # no template, or it refused
            raise InvalidRequestError(f"messages could not be rendered with the chat template: {exc}",
                                      param="messages") from exc
        return self.encode(str(text), add_special_tokens=False)

    def decode(self, ids: Seq[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def token_text(self, token_id: int) -> str:
        """Text of one token (cached: logprobs name every sampled token)."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self._token_text[token_id] = self.decode([token_id], skip_special_tokens=False)
        return text

    def check_prompt(self, ids: Seq[int], *, param: str) -> None:
        """Raise ``InvalidRequestError`` for an empty prompt or an id outside the vocabulary."""
        if not ids:
            raise InvalidRequestError(f"{param} must not be empty.", param=param)
        bad = next((token for token in ids if not 0 <= token < self.vocab_size), None)
        if bad is not None:
            raise InvalidRequestError(
                f"Token id {bad} in {param} is out of vocabulary (ids go from 0 to "
                f"{self.vocab_size - 1}).", param=param)

    def check_text_length(self, chars: int, *, param: str) -> None:
        """Refuse text far too long to fit, before tokenizing it (seconds per MiB on a CPU).

        Twice the most characters ``max_model_len`` tokens can cover: a text
        that normalises shorter still gets its exact count from the tokenizer.
        """
        limit = 2 * self.max_model_len * self.max_token_chars
        if chars > limit:
            raise InvalidRequestError(
                f"This model's maximum context length is {self.max_model_len} tokens; your {param} "
                f"has {chars} characters, more than {self.max_model_len} tokens can hold. Shorten "
                f"{param}.", param=param)

    def check_length(self, prompt_tokens: int, max_tokens: int, *, param: str) -> None:
        """Raise ``InvalidRequestError`` unless prompt + ``max_tokens`` fit the context."""
        limit = self.max_model_len
        if prompt_tokens >= limit:
            raise InvalidRequestError(
                f"This model's maximum context length is {limit} tokens. However, your {param} has "
                f"{prompt_tokens} tokens, which leaves no room for a completion. Shorten {param}.",
                param=param)
        if prompt_tokens + max_tokens > limit:
            raise InvalidRequestError(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {param}, {max_tokens} "
                f"for the completion). Lower max_tokens to at most {limit - prompt_tokens} or "
                f"shorten the {param}.", param="max_tokens")

    def check_request(self, prompts: Seq[Seq[int]], params: SamplingParams, n: int, adapter: str | None) -> None:
        """Raise ``InvalidRequestError`` for a request the engine cannot take."""
        if not 1 <= n <= _MAX_N:
            raise InvalidRequestError(f"n must be between 1 and {_MAX_N}, got {n}.", param="n")
        if n > 1 and params.greedy:
            raise InvalidRequestError(f"n must be 1 when using greedy sampling, got {n}.", param="n")
        if adapter is not None and adapter not in self._lora_paths:
            raise InvalidRequestError(f"no LoRA adapter named {adapter!r} is loaded.", param="model")
        if not prompts:
            raise InvalidRequestError("prompt must not be empty.", param="prompt")
        if params.stop_token_ids:
            self.check_prompt(params.stop_token_ids, param="stop_token_ids")
        for prompt in prompts:
            self.check_prompt(prompt, param="prompt")
            self.check_length(len(prompt), params.max_tokens, param="prompt")

    # --------------------------------------------------------- generating ---

    @abstractmethod
    def submit(self, prompts: Seq[Seq[int]], params: SamplingParams, *, n: int = 1,
               adapter: str | None = None, stream: bool = False) -> Generation:
        """Queue ``n`` choices for each prompt; call from a running event loop.

        Choice ``i`` of prompt ``p`` has index ``p * n + i`` (as in vLLM's
        responses); seeded choices use ``seed + i``.
        """

    async def generate(self, prompt_ids: Seq[int], params: SamplingParams, *, n: int = 1,
                       adapter: str | None = None) -> list[SequenceUpdate]:
        """The ``n`` finished choices for one prompt."""
        return await self.submit([prompt_ids], params, n=n, adapter=adapter).result()

    @abstractmethod
    async def prompt_logprobs(self, prompts: Seq[Seq[int]], k: int, *, adapter: str | None = None
                              ) -> list[list[dict[int, tuple[float, int]] | None]]:
        """vLLM's ``prompt_logprobs`` of each prompt: per token (None for the first), its own logprob and
        vocabulary rank, and those of the ``k`` most likely tokens there, by token id.

        The raw model's log-softmax (temperature 1), as vLLM computes prompt logprobs, between two
        decode steps: the prefix cache and the running batch are left alone.
        """

    # ----------------------------------------------------------- weights ---

    @abstractmethod
    async def update_weights(self, weights_path: str, version: int | None = None) -> WeightUpdate:
        """Load full weights from safetensors; responses then report the new version.

        The files are read and checked while generation goes on; the copy waits until the
        running batch has finished, so no response mixes two versions.
        """

    def adapters(self) -> dict[str, str]:
        """Loaded LoRA adapters: name -> folder."""
        return dict(self._lora_paths)

    @abstractmethod
    async def load_lora(self, name: str, path: str) -> None:
        """Serve the adapter at ``path`` (merged into a copy of the model) under ``name``."""

    @abstractmethod
    async def unload_lora(self, name: str) -> None:
        """Stop serving the adapter ``name``."""

    @staticmethod
    def check_version(version: int | None) -> None:
        """Raise ``InvalidRequestError`` for a negative weights version."""
        if version is not None and version < 0:
            raise InvalidRequestError(f"version must not be negative, got {version}.", param="version")

    def check_loaded_lora(self, name: str) -> None:
        """Raise ``InvalidRequestError`` unless an adapter ``name`` is loaded (for ``unload_lora``)."""
        if name not in self._lora_paths:
            raise InvalidRequestError(f"no LoRA adapter named {name!r} is loaded.", param="lora_name")

    def check_new_lora(self, name: str) -> None:
        """Raise unless ``load_lora`` can take an adapter called ``name`` (and peft is installed)."""
        if not peft_available():
            raise UnsupportedError(
                "LoRA adapters need the peft package, which is not installed: "
                f"{MissingDependencyError.install_hint('train', 'peft')}.", param="lora_path")
        if not name or name in self._lora_paths:
            raise InvalidRequestError(f"The lora adapter {name!r} has already been loaded."
                                      if name else "lora_name must not be empty.", param="lora_name")


class Engine(BaseEngine):
    """A causal LM, its tokenizer and the scheduler that batches requests for it, in this process."""

    def __init__(self, config: EngineConfig) -> None:
        from transformers import AutoModelForCausalLM

        from agentgym.models import resolve_model

        model_path = resolve_model(config.model)
        self.device = resolve_device(config.device)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_DTYPES[config.dtype])
        self.model = model.to(self.device).eval()
        super().__init__(config, model_path)
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)
        self.max_model_len = _max_model_len(self.model.config, config.max_model_len)
        self._onednn = config.onednn_linear and linear.available(self.device, self.model.dtype)
        if self._onednn:
            linear.install(self.model)
        self.eos_token_ids = _eos_ids(self.tokenizer, self.model)
        pad = self.tokenizer.pad_token_id
        self._models: dict[str | None, torch.nn.Module] = {None: self.model}
        limits = Limits(config.max_num_seqs, config.max_prefill_tokens, config.batch_wait_ms / 1000,
                        prefix_cache_bytes=config.prefix_cache_mib * 2**20)
        self._scheduler = Scheduler(
            self._models, eos_ids=self.eos_token_ids, pad_id=pad if pad is not None else 0,
            max_model_len=self.max_model_len, decode=self.decode, device=self.device,
            limits=limits, seed=config.seed)

    # ---------------------------------------------------------- lifecycle ---

    def start(self) -> None:
        """Start the engine thread (idempotent; ``submit`` also starts it)."""
        self._scheduler.start(self.config.torch_threads)

    def close(self) -> None:
        """Stop the engine thread; requests still running get an error."""
        self._scheduler.stop()

    @property
    def alive(self) -> bool:
        return True  # the engine thread restarts on the next request should it have died

    @property
    def policy_version(self) -> int:
        """The version of the weights being served (0 until the first update)."""
        return self._scheduler.policy_version

    def stats(self) -> dict[str, int]:
        """:meth:`read_stats`, from any thread."""
        return {**self._scheduler.snapshot(), "policy_version": self.policy_version}

    async def read_stats(self) -> dict[str, int]:
        return self.stats()

    async def reset_prefix_cache(self) -> None:
        self.start()  # the engine thread runs the clearing
        await asyncio.wrap_future(self._scheduler.call(self._clear_prefix_cache, drain=False))

    def _clear_prefix_cache(self) -> None:
        self._scheduler.prefix.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        release_free_memory()

    # --------------------------------------------------------- generating ---

    def submit(self, prompts: Seq[Seq[int]], params: SamplingParams, *, n: int = 1,
               adapter: str | None = None, stream: bool = False) -> Generation:
        self.check_request(prompts, params, n, adapter)
        queue: asyncio.Queue[SequenceUpdate | EngineFailure] = asyncio.Queue()
        sequences = self.enqueue(prompts, params, n, adapter, Sink(asyncio.get_running_loop(), queue, stream))
        return Generation(len(sequences), queue, lambda: cancel_sequences(sequences))

    def enqueue(self, prompts: Seq[Seq[int]], params: SamplingParams, n: int, adapter: str | None,
                sink: Sink) -> list[Sequence]:
        """Hand a checked request's choices to the scheduler; their updates go to ``sink``."""
        sequences = [self._sequence(list(prompt), params.for_choice(i), sink, p * n + i, adapter)
                     for p, prompt in enumerate(prompts) for i in range(n)]
        self.start()
        self._scheduler.submit(sequences)
        return sequences

    def _sequence(self, prompt: list[int], params: SamplingParams, sink: Sink, index: int,
                  adapter: str | None) -> Sequence:
        tracker = None
        if sink.stream or params.stop:  # text is decoded every step only when needed
            skip = params.skip_special_tokens
            tracker = TextTracker(lambda ids: self.decode(ids, skip), params.stop)
        return Sequence(prompt, params, sink, index=index, adapter=adapter, tracker=tracker)

    async def prompt_logprobs(self, prompts: Seq[Seq[int]], k: int, *, adapter: str | None = None
                              ) -> list[list[dict[int, tuple[float, int]] | None]]:
        model = self._models[adapter]

        def score() -> list[list[dict[int, tuple[float, int]] | None]]:
            return [_prompt_logprobs(model, list(prompt), k, self.device) for prompt in prompts]

        self.start()
        return await asyncio.wrap_future(self._scheduler.call(score, drain=False))

    # ----------------------------------------------------------- weights ---

    async def update_weights(self, weights_path: str, version: int | None = None) -> WeightUpdate:
        self.check_version(version)
        tensors = await asyncio.to_thread(read_safetensors, weights_path)
        await asyncio.to_thread(check_weights, self.model, tensors)

        def apply() -> WeightUpdate:
            started = time.perf_counter()
            count = load_weights(self.model, tensors)
            if self._onednn:
                linear.repack(self.model)
            self._clear_prefix_cache()  # KV computed with the old weights
            for name, path in self._lora_paths.items():  # adapters sit on the new base now
                self._models[name] = self._merged(path)
            new = self.policy_version + 1 if version is None else version
            self._scheduler.policy_version = new
            return WeightUpdate(new, count, time.perf_counter() - started)

        return await asyncio.wrap_future(self._scheduler.call(apply))

    async def load_lora(self, name: str, path: str) -> None:
        self.check_new_lora(name)

        def apply() -> None:
            self._models[name] = self._merged(path)
            self._lora_paths[name] = path
            self._scheduler.prefix.clear()  # a name may come back with other weights

        await asyncio.wrap_future(self._scheduler.call(apply))

    def _merged(self, path: str) -> torch.nn.Module:
        """The base model with the adapter at ``path`` merged in, on oneDNN when the base is."""
        merged = merged_lora_model(self.model, path)
        if self._onednn:
            linear.install(merged)
        return merged

    async def unload_lora(self, name: str) -> None:
        self.check_loaded_lora(name)

        def apply() -> None:
            self._lora_paths.pop(name, None)
            self._models.pop(name, None)
            self._clear_prefix_cache()  # and hand the merged copy's memory back

        await asyncio.wrap_future(self._scheduler.call(apply))


def cancel_sequences(sequences: list[Sequence]) -> None:
    """Mark choices cancelled; the engine drops them before its next step."""
    for seq in sequences:
        seq.cancelled = True  # the only field another thread writes; read before each step


def _prompt_logprobs(model: torch.nn.Module, prompt: list[int], k: int, device: torch.device
                     ) -> list[dict[int, tuple[float, int]] | None]:
    """One prompt's entries (see :meth:`Engine.prompt_logprobs`): the token first, then the top ``k``
    (a token among them keeps its top-k rank, as vLLM's dict does)."""
    ids = torch.tensor([prompt], device=device)
    logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    targets = ids[0, 1:].unsqueeze(-1)
    own = logprobs.gather(-1, targets)
    ranks = (logprobs >= own).sum(dim=-1).tolist()  # vLLM counts ties as ahead
    top_values, top_ids = logprobs.topk(k, dim=-1) if k else (logprobs[:, :0], targets[:, :0])
    entries: list[dict[int, tuple[float, int]] | None] = [None]
    for position, (token, value) in enumerate(zip(targets[:, 0].tolist(), own[:, 0].tolist())):
        entry = {token: (max(value, -9999.0), ranks[position])}
        for rank, (other, other_value) in enumerate(zip(top_ids[position].tolist(),
                                                        top_values[position].tolist()), start=1):
            entry[other] = (max(other_value, -9999.0), rank)
        entries.append(entry)
    return entries


def _max_model_len(config: PretrainedConfig, requested: int | None) -> int:
    """The context length: the request, bounded by what the model's positions allow."""
    names = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
    limit = next((int(getattr(config, name)) for name in names if getattr(config, name, None)), None)
    if requested is None:
        if limit is None:
            raise ConfigError("the model's config gives no maximum length; pass max_model_len.")
        return limit
    if limit is not None and requested > limit:
        raise ConfigError(f"max_model_len {requested} is larger than the model's maximum "
                          f"positions ({limit}); use at most {limit}.")
    return requested


def _eos_ids(tokenizer: PreTrainedTokenizerBase, model: torch.nn.Module) -> set[int]:
    """EOS ids of the tokenizer and of the model's generation config."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif isinstance(config_eos, list | tuple):
        ids.update(int(token) for token in config_eos)
    return ids

"""Sampling parameters of one choice, and batched sampling with per-row settings.

Every row of a batch has its own temperature, top-p and (optionally) seed.
The logprob reported for a sampled token is taken under the *processed*
distribution, the one it was drawn from (temperature, then top-p), as vLLM
does with ``--logprobs-mode processed_logprobs``; a greedy row
(``temperature == 0``) reports the raw model's log-softmax, again as vLLM.

Drawing inverts the cumulative distribution: one uniform number per row,
looked up in the running sum of the row's (unnormalised) probabilities. It
samples from ``p`` exactly, like the exponential race vLLM uses, but costs one
random number per row instead of one per vocabulary entry, and never
materialises the full log-softmax (a vocabulary of 49,152 made those passes
a tenth of a decode step on a CPU). Each seeded row draws its number from its
own ``torch.Generator``: a seeded choice gives the same tokens whatever else
shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from agentgym.errors import InvalidRequestError

__all__ = ["MAX_LOGPROBS", "SampleOutput", "SamplingParams", "make_generator", "processed_logprobs",
           "sample"]

MAX_LOGPROBS = 20  # the most alternatives a request may ask for, as OpenAI's limit
_GREEDY_EPS = 1e-5  # vLLM's threshold: a lower temperature means greedy


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample one choice; invalid values raise ``InvalidRequestError`` naming the field.

    ``logprobs``: None for no logprobs, else how many top alternatives to
    return beside the sampled token (0 = only the sampled token's).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise InvalidRequestError(
                f"max_tokens must be at least 1, got {self.max_tokens}.", param="max_tokens")
        if not 0.0 <= self.temperature <= 100.0:
            raise InvalidRequestError(
                f"temperature must be between 0 and 100 (0 = greedy), got {self.temperature}.",
                param="temperature")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}.", param="top_p")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise InvalidRequestError(
                f"logprobs must be between 0 and {MAX_LOGPROBS}, got {self.logprobs}.",
                param="logprobs")
        if any(not text for text in self.stop):
            raise InvalidRequestError("stop strings must not be empty.", param="stop")

    @property
    def greedy(self) -> bool:
        return self.temperature < _GREEDY_EPS

    def for_choice(self, index: int) -> SamplingParams:
        """The params of choice ``index`` of ``n``: seeded choices get ``seed + index`` (as vLLM)."""
        if self.seed is None or index == 0:
            return self
        return replace(self, seed=self.seed + index)


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A generator seeded with ``seed`` (any int), or None for unseeded rows."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed % 2**64)
    return generator


@dataclass(frozen=True, slots=True)
class SampleOutput:
    """One step's draws: a token and its logprob per row, and the top alternatives if asked."""

    token_ids: list[int]
    logprobs: list[float]
    top_ids: list[list[int]] | None
    top_logprobs: list[list[float]] | None


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
           generators: list[torch.Generator | None], rng: torch.Generator,
           top_k: int = 0) -> SampleOutput:
    """Draw one token per row of ``logits`` ``[rows, vocab]``.

    ``temperature`` and ``top_p`` are ``[rows]`` (greedy rows: temperature 0);
    ``generators[row]`` is that row's seeded generator or None (then ``rng``).
    ``top_k`` is how many alternatives to report (the most any row asked for).
    """
    logits = logits.float()
    greedy = temperature < _GREEDY_EPS
    if bool(greedy.all()):
        logprobs = torch.log_softmax(logits, dim=-1)
        tokens = logprobs.argmax(dim=-1)
        chosen = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
        return _output(tokens, chosen, logprobs, top_k)
    effective_t = torch.where(greedy, torch.ones_like(temperature), temperature)
    effective_p = torch.where(greedy, torch.ones_like(top_p), top_p)
    scaled = _processed_logits(logits, effective_t, effective_p)
    # exp(scaled - max) summed as it goes: the running sum is the unnormalised CDF.
    top_value = scaled.amax(dim=-1, keepdim=True)
    weights = (scaled - top_value).exp_()
    cdf = weights.cumsum(dim=-1)
    total = cdf[:, -1:]
    log_total = total.log()
    drawn = _invert(cdf, weights, _uniforms(generators, rng, scaled.device) * total)
    if bool(greedy.any()):
        drawn = torch.where(greedy, scaled.argmax(dim=-1), drawn)
    chosen = scaled.gather(1, drawn.unsqueeze(1)).squeeze(1) - top_value.squeeze(1) - log_total.squeeze(1)
    if top_k > 0:
        values, indices = scaled.topk(top_k, dim=-1)
        return _output(drawn, chosen, None, top_k, (values - top_value - log_total, indices))
    return _output(drawn, chosen, None, 0)


def _output(tokens: torch.Tensor, chosen: torch.Tensor, logprobs: torch.Tensor | None, top_k: int,
            top: tuple[torch.Tensor, torch.Tensor] | None = None) -> SampleOutput:
    top_ids = top_values = None
    if top_k > 0:
        values, indices = top if top is not None else logprobs.topk(top_k, dim=-1)  # type: ignore[union-attr]
        top_ids, top_values = indices.tolist(), values.clamp_min(-9999.0).tolist()
    return SampleOutput(tokens.tolist(), chosen.clamp_min(-9999.0).tolist(), top_ids, top_values)


def _uniforms(generators: list[torch.Generator | None], rng: torch.Generator,
              device: torch.device) -> torch.Tensor:
    """One U[0, 1) number per row, ``[rows, 1]``: a seeded row's from its own generator."""
    uniform = torch.empty((len(generators), 1), device=device)
    seeded = [(row, gen) for row, gen in enumerate(generators) if gen is not None]
    if len(seeded) < len(generators):
        uniform.uniform_(generator=rng)
    for row, generator in seeded:
        uniform[row].uniform_(generator=generator)
    return uniform


def _invert(cdf: torch.Tensor, weights: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per row, the first token whose running sum passes ``targets`` (a token of weight 0 never
    does, as its sum equals the one before it); a target rounded up to the total takes the last
    token of weight above 0."""
    tokens = torch.searchsorted(cdf, targets, right=True).squeeze(1)
    overflow = tokens >= cdf.shape[1]
    if bool(overflow.any()):
        last = cdf.shape[1] - 1 - (weights.flip(-1) > 0).to(torch.uint8).argmax(dim=-1)
        tokens = torch.where(overflow, last, tokens)
    return tokens


def processed_logprobs(logits: torch.Tensor, temperature: torch.Tensor,
                       top_p: torch.Tensor) -> torch.Tensor:
    """Log-probabilities after temperature and top-p (tokens cut by top-p get -inf)."""
    return torch.log_softmax(_processed_logits(logits, temperature, top_p), dim=-1)


def _processed_logits(logits: torch.Tensor, temperature: torch.Tensor,
                      top_p: torch.Tensor) -> torch.Tensor:
    """Logits after temperature and top-p (cut tokens: -inf), before normalising."""
    if bool((temperature != 1.0).any()):  # most RL sampling runs at 1: spare a pass over the vocabulary
        logits = logits / temperature.unsqueeze(1)
    if bool((top_p < 1.0).any()):
        logits = _top_p_filter(logits, top_p)
    return logits


def _top_p_filter(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep, per row, the fewest most likely tokens whose mass reaches ``top_p``."""
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    ordered = ordered.masked_fill(mass_before > top_p.unsqueeze(1), float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, ordered)

"""The native GRPO trainer: PyTorch, FSDP2 across ranks, one plain process on a laptop.

One :meth:`FSDPTrainer.train_step` takes a step's trajectory rows and:

1. :meth:`compute_advantages`: group-relative, one per completion token of
   each row (the episode's; with ``turn_advantage_weight``, plus its turn's:
   GiGPO), zero-variance groups skipped when configured;
2. turns the rows into sequences, deals them out over the ranks, shuffles
   and splits the whole step into ``mini_batches`` (one optimiser step each;
   a rank trains on its own sequences of each) and a rank's part into packed
   or padded micro-batches whose gradients accumulate (so N ranks compute
   what one process does, up to the order of the sums);
3. :meth:`compute_logprobs` / :meth:`compute_loss`: the clipped token-level
   loss of :func:`agentgym.trainers.algorithms.policy_loss`, importance-
   corrected against the server's logprobs, normalised over the whole
   mini-batch (every rank, every micro-batch) so accumulation changes nothing;
4. clips the gradient norm and steps the optimiser (AdamW or SGD).

Each numbered piece is a method a subclass can override alone. Under
``torchrun`` every rank runs the same number of forward/backward passes
(FSDP's collectives need it): a rank with fewer micro-batches runs empty ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from agentgym.models import resolve_model
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.algorithms import LOSS_METRICS, LossOutput, masked_mean, policy_loss
from agentgym.trainers.batch import (
    MicroBatch,
    TrainSequence,
    collate,
    packed_attention_mask,
    plan_micro_batches,
    to_sequences,
    token_advantages,
    turn_advantages,
    turn_credit_share,
)
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.fsdp.distributed import Dist, all_reduce, full_state_dict, init_distributed, shard_model
from agentgym.trainers.optimizers import build_optimizer

__all__ = ["FSDPTrainer", "StepStats"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class StepStats:
    """Sums over a step's micro-batches, turned into metrics at the end."""

    loss: float = 0.0
    tokens: float = 0.0
    weighted: dict[str, float] | None = None
    model_tokens: int = 0
    grad_norms: list[float] | None = None

    def add(self, output: LossOutput, scaled_loss: float, entropy_sum: float, model_tokens: int) -> None:
        tokens = output.metrics["tokens"]
        self.loss += scaled_loss
        self.tokens += tokens
        self.model_tokens += model_tokens
        weighted = self.weighted if self.weighted is not None else {}
        for name in LOSS_METRICS:
            weighted[name] = weighted.get(name, 0.0) + output.metrics[name] * tokens
        weighted["entropy"] = weighted.get("entropy", 0.0) + entropy_sum
        self.weighted = weighted


class FSDPTrainer:
    """GRPO on trajectory rows with PyTorch (FSDP2 when launched by torchrun).

    Args:
        config: the run's :class:`TrainConfig`.
        dist: where this process stands (default: joins torchrun's group if any).
        device: auto, cpu or cuda.
    """

    def __init__(self, config: TrainConfig, *, dist: Dist | None = None, device: str = "auto") -> None:
        self.config = config
        self.dist = dist or init_distributed(device)
        self.model_path = resolve_model(config.model)
        torch.manual_seed(config.seed)  # same initial LoRA weights on every rank and every run
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.model = self._load_model()
        self.ref_model = self._load_reference() if config.kl_coef > 0 else None
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(params, config.optimizer, lr=config.lr, adam_betas=config.adam_betas,
                                         momentum=config.momentum, weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        #: training steps done: the policy version of the current weights
        self.version = 0
        self.optimizer_steps = 0
        self._old: dict[int, torch.Tensor] = {}

    # -- setup -------------------------------------------------------------------

    def _load_model(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=_DTYPES[self.config.dtype])
        model.config.use_cache = False
        if self.config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.config.lora:
            model = self._with_lora(model)
        if self.config.frozen_parameters:
            from agentgym.trainers.sft import freeze_parameters

            freeze_parameters(model, self.config.frozen_parameters)
        model.to(self.dist.device)
        model.train()
        return shard_model(model, self.dist)

    def _with_lora(self, model: torch.nn.Module) -> torch.nn.Module:
        lora = self.config.lora_config()  # MissingDependencyError without peft
        from peft import get_peft_model

        return get_peft_model(model, lora)

    def _load_reference(self) -> torch.nn.Module | None:
        """The frozen initial policy for the KL term (LoRA: the base, adapters switched off)."""
        if self.config.lora:
            return None
        from transformers import AutoModelForCausalLM

        ref = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=_DTYPES[self.config.dtype])
        ref.config.use_cache = False
        ref.requires_grad_(False).eval().to(self.dist.device)
        return shard_model(ref, self.dist)

    def _lr_factor(self, optimizer_step: int) -> float:
        """Linear warm-up, then constant, linear or cosine down to ``min_lr_ratio``."""
        config = self.config
        if optimizer_step < config.warmup_steps:
            return (optimizer_step + 1) / config.warmup_steps
        if config.lr_schedule == "constant":
            return 1.0
        span = max(config.optimizer_steps_total - config.warmup_steps, 1)
        progress = min((optimizer_step - config.warmup_steps) / span, 1.0)
        shape = 1.0 - progress if config.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * shape

    # -- the pieces of a step -------------------------------------------------------

    def compute_advantages(self, rows: Sequence[TrajectoryRow], per_turn: dict[str, list[float]] | None = None
                           ) -> list[list[float] | None]:
        """One advantage per completion token of each row (None: skip the row).

        ``per_turn``: the rows' turn-level advantages, when :meth:`train_step` has them already.
        """
        return token_advantages(rows, **self.config.advantage_options(), per_turn=per_turn)

    def compute_logprobs(self, model: torch.nn.Module, batch: MicroBatch, *, with_entropy: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[S, T] logprobs of the completion tokens (and their entropy, detached, if asked).

        Logits are divided by the sampling temperature: the server sampled
        from that distribution, and the ratios compare against it.
        """
        output = model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                       attention_mask=self._attention_mask(model, batch), logits_to_keep=batch.keep,
                       use_cache=False)
        logits = output.logits.float()
        if self.config.temperature > 0 and self.config.temperature != 1.0:
            logits = logits / self.config.temperature
        flat = logits.reshape(-1, logits.shape[-1])
        normaliser = torch.logsumexp(flat, dim=-1)
        logprobs = flat[batch.token_index, batch.target_ids] - normaliser[batch.token_index]
        entropy = None
        if with_entropy:
            with torch.no_grad():
                per_position = normaliser - (torch.softmax(flat, dim=-1) * flat).sum(dim=-1)
                entropy = per_position[batch.token_index]
        return logprobs, entropy

    @staticmethod
    def _attention_mask(model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor | None:
        if batch.attention_mask is not None:
            return batch.attention_mask
        implementation = getattr(model.config, "_attn_implementation", "sdpa")
        if implementation.startswith("flash"):
            return None  # flash attention reads packed sequences from the position ids
        if implementation == "sdpa":
            return packed_attention_mask(batch.segment_ids)
        return packed_attention_mask(batch.segment_ids, dtype=model.dtype)

    def compute_loss(self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, batch: MicroBatch,
                     ref_logprobs: torch.Tensor | None = None, entropy: torch.Tensor | None = None
                     ) -> LossOutput:
        """The policy loss of one micro-batch, averaged within it (the caller rescales)."""
        rollout = None
        if self.config.correction != "none":
            # Rows without server logprobs (model-free or retokenized) get weight 1.
            known = batch.has_rollout_logprobs.unsqueeze(-1)
            rollout = torch.where(known, batch.rollout_logprobs, old_logprobs.detach())
        return policy_loss(logprobs, old_logprobs, batch.advantages, batch.loss_mask, self.config.loss_config(),
                           rollout_logprobs=rollout, ref_logprobs=ref_logprobs, entropy=entropy)

    def compute_sft_loss(self, logprobs: torch.Tensor, batch: MicroBatch) -> LossOutput:
        """Negative log-likelihood of the sampled tokens, averaged over them (the warm-up's loss)."""
        loss = -masked_mean(logprobs, batch.loss_mask)
        zero = {name: 0.0 for name in ("clip_fraction", "kl")}
        return LossOutput(loss=loss, metrics={**zero, "ratio_mean": 1.0, "is_weight_mean": 1.0,
                                              "policy_token_share": 1.0, "tokens": float(batch.loss_mask.sum())})

    # -- a step ------------------------------------------------------------------

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        """Learn from one step's rows (every rank passes the same rows); returns metrics."""
        start = time.perf_counter()
        config = self.config
        # Once per step: the advantages and the turn_credit_share metric both read them.
        gigpo = config.turn_advantage_weight > 0
        per_turn = turn_advantages(rows, config.advantage, config.turn_discount) if gigpo else {}
        advantages = self.compute_advantages(rows, per_turn)
        sequences = to_sequences(rows, advantages)
        stats = StepStats(grad_norms=[])
        local = self._my_share(sequences)
        self._remember_old_logprobs(local)
        mine = {id(sequence) for sequence in local}
        generator = torch.Generator().manual_seed(self.config.seed * 7919 + self.version)
        for _ in range(self.config.epochs):
            # Shuffle and split the whole step, then each rank trains on its part of each
            # mini-batch: every optimiser step sees the same sequences whatever the number of ranks.
            order = torch.randperm(len(sequences), generator=generator).tolist()
            for mini in self._split([sequences[i] for i in order], self.config.mini_batches):
                self._optimizer_step([s for s in mini if id(s) in mine], stats)
        self.version += 1
        metrics = self._metrics(stats, rows, advantages, sequences, time.perf_counter() - start)
        if gigpo:
            metrics["turn_credit_share"] = turn_credit_share(per_turn)
        return metrics

    def sft_step(self, rows: Sequence[TrajectoryRow], lr: float | None = None) -> dict[str, float]:
        """One optimiser step of supervised fine-tuning on the rows' sampled tokens (all of them).

        The format warm-up uses it. ``lr`` overrides the learning rate for this step.
        """
        start = time.perf_counter()
        sequences = to_sequences(rows, [1.0] * len(rows))
        stats = StepStats(grad_norms=[])
        saved = [group["lr"] for group in self.optimizer.param_groups]
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        try:
            self._optimizer_step(self._my_share(sequences), stats, sft=True, schedule=False)
        finally:
            for group, value in zip(self.optimizer.param_groups, saved):
                group["lr"] = value
        return self._metrics(stats, rows, [1.0] * len(rows), sequences, time.perf_counter() - start)

    def _my_share(self, sequences: list[TrainSequence]) -> list[TrainSequence]:
        """This rank's share of ``sequences``: dealt longest first, round robin, so tokens balance."""
        order = sorted(range(len(sequences)), key=lambda i: (-len(sequences[i].input_ids), i))
        return [sequences[i] for i in order[self.dist.rank::self.dist.world_size]]

    @staticmethod
    def _split(items: list[TrainSequence], parts: int) -> list[list[TrainSequence]]:
        size = math.ceil(len(items) / parts) if items else 0
        chunks = [items[i * size:(i + 1) * size] for i in range(parts)] if size else [[] for _ in range(parts)]
        return chunks

    def _normaliser(self, mini: list[TrainSequence], token_mean: bool) -> float:
        """What the loss of the whole mini-batch (all ranks) is divided by, per the aggregation."""
        if token_mean:
            local = sum(s.loss_tokens for s in mini)
        else:
            local = len(mini)
        total = all_reduce(torch.tensor(float(local)), self.dist).item()
        return max(total, 1.0)

    def _micro_batches(self, mini: list[TrainSequence]) -> list[list[TrainSequence]]:
        plan = plan_micro_batches([len(s.input_ids) for s in mini], pack=self.config.pack_sequences,
                                  micro_batch_tokens=self.config.micro_batch_tokens,
                                  micro_batch_size=self.config.micro_batch_size)
        groups = [[mini[i] for i in indices] for indices in plan]
        # FSDP: every rank must run as many forward/backward passes as the busiest one.
        count = int(all_reduce(torch.tensor(len(groups)), self.dist, op="max").item())
        empty = TrainSequence(input_ids=[self.pad_id, self.pad_id], prompt_length=1, loss_mask=[0],
                              rollout_logprobs=[0.0], has_rollout_logprobs=False, advantages=[0.0])
        return groups + [[empty]] * (count - len(groups))

    def _optimizer_step(self, mini: list[TrainSequence], stats: StepStats, *, sft: bool = False,
                        schedule: bool = True) -> None:
        token_mean = sft or self.config.aggregation == "token_mean"
        normaliser = self._normaliser(mini, token_mean)
        self.optimizer.zero_grad(set_to_none=True)
        for group in self._micro_batches(mini):
            batch = collate(group, pack=self.config.pack_sequences, pad_id=self.pad_id).to(self.dist.device)
            logprobs, entropy = self.compute_logprobs(self.model, batch, with_entropy=True)
            if sft:
                output = self.compute_sft_loss(logprobs, batch)
            else:
                output = self._policy_loss(logprobs, batch, group, entropy)
            if token_mean:
                weight = float(batch.loss_mask.sum())
            else:
                weight = float(sum(s.loss_tokens > 0 for s in group))
            # FSDP averages gradients over ranks; scale back up so the result is a global sum.
            scale = weight / normaliser * self.dist.world_size
            (output.loss * scale).backward()
            entropy_sum = float((entropy * batch.loss_mask).sum()) if entropy is not None else 0.0
            stats.add(output, float(output.loss.detach()) * weight / normaliser, entropy_sum, batch.num_tokens)
        stats.grad_norms.append(self._clip_and_step(schedule))

    def _policy_loss(self, logprobs: torch.Tensor, batch: MicroBatch, group: list[TrainSequence],
                     entropy: torch.Tensor | None = None) -> LossOutput:
        old = logprobs.detach() if self._single_update else self._old_logprobs(group, logprobs.detach())
        ref = None
        if self.config.kl_coef > 0:
            with torch.no_grad():
                ref = self._reference_logprobs(batch)
        return self.compute_loss(logprobs, old, batch, ref, entropy)

    @property
    def _single_update(self) -> bool:
        """One update per rollout: pi_old is the current policy, so no extra forward pass."""
        return self.config.updates_per_step == 1

    def _remember_old_logprobs(self, local: list[TrainSequence]) -> None:
        """pi_old of every local sequence, with the weights of the step's start.

        Needed when a step makes several updates (mini-batches or epochs):
        later updates compare against these, and the clip starts to bite.
        """
        self._old.clear()
        if self._single_update:
            return
        with torch.no_grad():
            for group in self._micro_batches(local):
                batch = collate(group, pack=self.config.pack_sequences, pad_id=self.pad_id).to(self.dist.device)
                logprobs, _ = self.compute_logprobs(self.model, batch)
                for s, sequence in enumerate(group):
                    self._old[id(sequence)] = logprobs[s, :sequence.completion_length]

    def _old_logprobs(self, group: list[TrainSequence], like: torch.Tensor) -> torch.Tensor:
        old = torch.zeros_like(like)
        for s, sequence in enumerate(group):
            remembered = self._old.get(id(sequence))
            if remembered is not None:
                old[s, :remembered.shape[0]] = remembered
        return old

    def _reference_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        if self.ref_model is not None:
            return self.compute_logprobs(self.ref_model, batch)[0]
        with self.model.disable_adapter():  # LoRA: the base model is the reference
            return self.compute_logprobs(self.model, batch)[0]

    def _clip_and_step(self, schedule: bool = True) -> float:
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = self.config.max_grad_norm if self.config.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(norm, "full_tensor"):  # a DTensor under FSDP
            norm = norm.full_tensor()
        self.optimizer.step()
        if schedule:  # the format warm-up keeps its own learning rate
            self.scheduler.step()
        self.optimizer_steps += 1
        return float(norm)

    def _metrics(self, stats: StepStats, rows: Sequence[TrajectoryRow], advantages: Sequence[object],
                 sequences: list[TrainSequence], seconds: float) -> dict[str, float]:
        weighted = stats.weighted or {}
        totals = torch.tensor([stats.tokens, stats.model_tokens, *(weighted.get(k, 0.0) for k in _WEIGHTED)],
                              dtype=torch.float64)
        all_reduce(totals, self.dist)
        tokens, model_tokens = float(totals[0]), float(totals[1])
        metrics = {name: float(totals[2 + i]) / max(tokens, 1.0) for i, name in enumerate(_WEIGHTED)}
        loss = all_reduce(torch.tensor(stats.loss, dtype=torch.float64), self.dist).item()
        norms = stats.grad_norms or [0.0]
        metrics.update({
            "loss": loss / max(len(norms), 1),
            "grad_norm": sum(norms) / len(norms),
            "lr": float(self.scheduler.get_last_lr()[0]),
            "train_tokens": model_tokens,
            "loss_tokens": tokens,
            "train_tokens_per_s": model_tokens / max(seconds, 1e-9),
            "train_sequences": float(len(sequences)),
            "skipped_rows": float(len(rows) - len(sequences)),
            "filtered_groups_rows": float(sum(a is None for a in advantages)),
        })
        return metrics

    # -- weights out ---------------------------------------------------------------

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The full model weights (LoRA merged in) as a transformers state dict, on rank 0.

        Every rank must call it; ranks other than 0 get an empty dict.
        """
        state = full_state_dict(self.model, self.dist)
        if not self.dist.is_main:
            return {}
        if self.config.lora:
            from agentgym.trainers.fsdp.lora import merge_lora_state

            state = merge_lora_state(state, self.config.lora_alpha / self.config.lora_rank)
        return state

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write the (merged) weights, config and tokenizer as a transformers folder (rank 0)."""
        state = self.full_weights()
        folder = Path(folder)
        if self.dist.is_main:
            from transformers import AutoConfig, AutoModelForCausalLM

            config = AutoConfig.from_pretrained(self.model_path)
            with torch.device("meta"):
                skeleton = AutoModelForCausalLM.from_config(config)
            skeleton.load_state_dict(state, assign=True, strict=False)
            skeleton.tie_weights()
            skeleton.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)
        return folder


_WEIGHTED = (*LOSS_METRICS, "entropy")

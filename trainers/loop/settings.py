"""The settings the run loop reads: the run, the server, what a step plays, the format warm-up."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agentgym.rollout.seeds import read_seeds
from agentgym.trainers.sections import Section, register_section

__all__ = ["RolloutSettings", "RunSettings", "ServerSettings", "WarmupSettings"]


class RunSettings(Section):
    """The run: which trainer on which backend, its folder, length, budget, checkpoints and logs."""

    trainer: str = "grpo"
    """Trainer: grpo (online RL), ppo (RL with a critic), dpo (preference pairs), sft (fine-tune on rows),
    distill (learn a teacher's distributions) or rm (a reward model on pairs), or a plugin's."""
    backend: str | None = None
    """fsdp (native PyTorch, FSDP2 under torchrun) or trl; none: the trainer's default (sft: trl, the
    others: fsdp)."""
    out: str = "runs/train"
    """Run folder: settings, metrics, checkpoints, the final model, the report."""
    steps: int = Field(40, ge=1)
    """Training steps: each a batch of rows (a rollout, or a slice of a file), an update and a push."""
    seed: int = Field(0, ge=0)
    """Seed of everything: the levels each step plays, sampling, the model, the data order."""
    resume: bool = False
    """Continue from the newest checkpoint in ``out``."""
    max_seconds: float = Field(0.0, ge=0)
    """Wall-clock budget in seconds from the start (0: none). The run ends after the step that spends
    it, with a checkpoint and the final model; the lr schedule still spans ``steps``."""
    checkpoint_every: int = Field(10, ge=1)
    """Save a resumable checkpoint every this many steps (and at the end)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Checkpoints kept on disk (older ones are deleted)."""
    tensorboard: bool = False
    """Also log to TensorBoard (needs the tensorboard package)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs wandb)."""
    wandb_project: str = "agentgym"
    """The W&B project."""
    sample_episodes: int = Field(2, ge=0)
    """Episodes per step kept in samples.jsonl (for the report)."""
    log_episodes: bool = True
    """Write episodes.jsonl, a line per episode played, to pair a run with its control
    (scripts/compare_runs.py)."""
    max_idle_steps: int = Field(10, ge=0)
    """Stop with an error after this many steps in a row that trained on nothing (every group
    filtered, no pair, no row: the weights never moved); 0: never."""


class ServerSettings(Section):
    """The server episodes are played against, and how the new weights reach it."""

    base_url: str | None = None
    """OpenAI-compatible server to play against (ending in /v1); none: start the built-in one."""
    api_key: str = "EMPTY"
    """API key of ``base_url`` (the built-in server started here gets a random one)."""
    engine: Literal["builtin", "vllm"] = "builtin"
    """What ``base_url`` is: builtin (agentgym serve) or vllm; decides how weights are pushed."""
    sync_weights: bool = True
    """Push the new weights to the server after each step (off: a fixed server, off-policy)."""


class RolloutSettings(Section):
    """What a step plays (env, episodes, sampling), or the rollout file read instead."""

    env_id: str | None = None
    """Env to play (online training)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """The env's constructor arguments."""
    trajectories: str | None = None
    """Train on the rows of this Parquet file instead of playing (sft: several, comma-separated)."""
    group_size: int = Field(8, ge=1)
    """Episodes per seed (a GRPO group); advantages are relative within a group."""
    episodes_per_step: int = Field(32, ge=1)
    """Episodes a step plays; a multiple of ``group_size``."""
    max_turns: int | None = Field(None, ge=1)
    """Turn limit per episode (default: the env's); the env's prompt names it."""
    turn_budget: int | None = Field(None, ge=1)
    """Stop episodes after this many turns without telling the env (its prompt keeps its own limit)."""
    max_tokens: int = Field(16, ge=1)
    """Tokens one turn may sample."""
    max_context_tokens: int = Field(2048, ge=1)
    """Tokens an episode may hold: prompt, turns and replies."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature; the trainer divides its logits by it too."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling. Below 1 the server's logprobs are renormalised over the nucleus, which the
    importance correction cannot match: set loss.correction=none with it."""
    concurrency: int = Field(64, ge=1)
    """Episodes playing at once."""
    level_seeds: str | None = None
    """Play only these levels: a file of seeds, one per line (agentgym eval --failed-seeds-out), round
    and round; none: new seeds every step."""
    max_staleness: int = Field(1, ge=0)
    """Drop rows sampled by weights more than this many versions older than the learner's; with
    asynchronous, also how many steps ahead of learning the playing may run."""
    asynchronous: bool = False
    """Play the next steps' episodes (up to max_staleness ahead) while this step learns, with the
    weights the server has; the new weights reach the server between turns of the episodes in flight.
    Off: play, then learn, in turn."""

    @model_validator(mode="after")
    def _whole_groups(self) -> RolloutSettings:
        if self.episodes_per_step % self.group_size:
            raise ValueError(f"episodes_per_step ({self.episodes_per_step}) must be a multiple of group_size "
                             f"({self.group_size}) so every group is complete")
        if self.level_seeds is not None:
            read_seeds(self.level_seeds)  # a bad file fails now, not at the first step
        if self.asynchronous and self.trajectories is not None:
            raise ValueError("asynchronous overlaps playing with learning; a rollout file plays nothing")
        if self.asynchronous and self.max_staleness < 1:
            raise ValueError("asynchronous plays each step with the weights one step behind: it needs "
                             "max_staleness of 1 or more")
        return self

    @property
    def groups_per_step(self) -> int:
        return self.episodes_per_step // self.group_size


class WarmupSettings(Section):
    """The format warm-up before RL: a random-init model learns to write a readable action."""

    format_warmup_episodes: int | None = Field(None, ge=0)
    """Before RL, fine-tune on this many episodes of the env's random well-formed policy (actions only):
    a random-init model never writes a valid action, so GRPO would see equal rewards. 0: off; none:
    64 for a tiny model built here (random weights), 0 for any other model."""
    format_warmup_steps: int = Field(40, ge=0)
    """Optimiser steps of the format warm-up."""
    format_warmup_batch_size: int = Field(8, ge=1)
    """Episodes per optimiser step of the format warm-up."""
    format_warmup_lr: float | None = Field(3e-3, ge=0)
    """Learning rate of the format warm-up (none: ``lr``)."""

    def episodes_for(self, model: str) -> int:
        """The warm-up's episodes for ``model``: the setting, or when it is none 64 for a tiny model
        built here (random weights: it has never seen the format) and 0 for any other."""
        if self.format_warmup_episodes is not None:
            return self.format_warmup_episodes
        from agentgym.models import tiny_spec

        return 64 if tiny_spec(model) is not None else 0


register_section("run", RunSettings)
register_section("server", ServerSettings)
register_section("rollout", RolloutSettings)
register_section("warmup", WarmupSettings)

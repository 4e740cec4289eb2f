"""TRL's own GRPOTrainer on an agentgym single-turn env, through TRL's documented API: a dataset of the
env's prompts and a reward function that plays each completion in the env. The baseline of the
real-model comparison in docs/results.md ("A real pretrained LLM learning").

    .venv/bin/python examples/trl_grpo_baseline.py --env Math-LLM-v0 -k kinds=[arithmetic] -k levels=[2] \
        -k answer_format=last_number --model smollm2-135m --minutes 120 --out runs/real/trl

Same prompts as ``agentgym train`` plays (the env's instructions as the system message, its first
observation as the user's, seeds ``seed * 1_000_003 + group`` as the run loop draws them), the
same samples a step (``--prompts`` x ``--group-size``), the same sampling (``--temperature``, at
most ``--max-tokens``), the same learning rate; GRPOTrainer's own loss (TRL 1.16's default, DAPO's token
mean, no KL) and its own generation (transformers' ``generate``: TRL uses vLLM only on a GPU). The run
stops at ``--minutes`` (a TrainerCallback, public API) and saves the model to ``OUT/final``; each step's
reward, success and the tokens sampled go to ``OUT/metrics.jsonl`` with the minutes elapsed, for
scripts/plot_runs.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import yaml


def env_prompts(env_id: str, kwargs: dict[str, Any], seeds: list[int]) -> list[dict[str, Any]]:
    """One conversational prompt per seed, as the rollout manager opens an episode."""
    import agentgym

    rows = []
    for seed in seeds:
        env = agentgym.make(env_id, **kwargs)
        observation, _ = env.reset(seed=seed)
        rows.append({"prompt": [{"role": "system", "content": env.get_wrapper_attr("instructions")},
                                {"role": "user", "content": observation}], "seed": seed})
        env.close()
    return rows


def make_reward(env_id: str, kwargs: dict[str, Any], successes: list[float]) -> Any:
    """GRPOTrainer's reward function: each completion played as the env's one action on its prompt's seed.

    Each call's share of successes (the env's ``success``) is appended to ``successes``, for the log.
    """
    import agentgym

    def env_reward(prompts: list[Any], completions: list[Any], seed: list[int], **_: Any) -> list[float]:
        rewards, won = [], 0
        for completion, level in zip(completions, seed):
            env = agentgym.make(env_id, **kwargs)
            env.reset(seed=int(level))
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            _, reward, _, _, info = env.step(text)
            rewards.append(float(reward))
            won += bool(info.get("success"))
            env.close()
        successes.append(won / max(1, len(rewards)))
        return rewards

    return env_reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("-k", action="append", default=[], help="env argument NAME=VALUE (YAML)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--prompts", type=int, default=4, help="prompts a step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentgym.models import resolve_model

    kwargs = {name: yaml.safe_load(value) for name, value in (item.split("=", 1) for item in args.k)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = int(args.minutes * 60)  # more than can run: the clock stops it
    seeds = [args.seed * 1_000_003 + group for group in range(steps * args.prompts)]
    dataset = Dataset.from_list(env_prompts(args.env, kwargs, seeds[:args.prompts * 2000]))
    batch = args.prompts * args.group_size
    config = GRPOConfig(output_dir=str(out / "trl"), use_cpu=True, bf16=False, report_to=[], save_strategy="no",
                        num_generations=args.group_size, per_device_train_batch_size=batch,
                        gradient_accumulation_steps=1, max_completion_length=args.max_tokens, temperature=args.temperature,
                        learning_rate=args.lr, lr_scheduler_type="constant", max_steps=steps, logging_steps=1,
                        seed=args.seed, disable_tqdm=True, dataloader_num_workers=0, shuffle_dataset=False)
    started = time.monotonic()
    log = (out / "metrics.jsonl").open("w", encoding="utf-8")

    class Budget(TrainerCallback):
        """Stop at the budget; one line of metrics a step, with the minutes spent."""

        def on_log(self, args_: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **_: Any) -> None:
            if logs:
                record = {"step": state.global_step, "minutes": (time.monotonic() - started) / 60,
                          "success": successes[-1] if successes else None, **logs}
                log.write(json.dumps(record) + "\n")
                log.flush()

        def on_step_end(self, args_: Any, state: Any, control: Any, **_: Any) -> None:
            if time.monotonic() - started >= args.minutes * 60:
                control.should_training_stop = True

    successes: list[float] = []
    trainer = GRPOTrainer(model=resolve_model(args.model), reward_funcs=make_reward(args.env, kwargs, successes),
                          args=config, train_dataset=dataset, callbacks=[Budget()])
    trainer.train()
    trainer.save_model(str(out / "final"))
    trainer.processing_class.save_pretrained(str(out / "final"))
    print(f"{trainer.state.global_step} steps in {(time.monotonic() - started) / 60:.1f} min; model in {out / 'final'}")


if __name__ == "__main__":
    main()

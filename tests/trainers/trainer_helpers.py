"""What the trainer tests share: a model nudged away from the served one, greedy decoding on both sides,
and real rows cut to two turns."""

from __future__ import annotations

from typing import Any

import openai
import torch

from agentgym.rollout.rows import TrajectoryRow

#: The key these tests' servers are started with and their clients send (every server agentgym starts wants one).
API_KEY = "trainer-tests"

#: Fixed token-id prompts (ids of the tiny vocabulary) and how much to decode of each.
PROMPTS = [[1, 5, 6, 7], [1, 40, 41, 42, 43, 44], [1, 300, 200, 100, 9], [1, 77], [2, 9, 500, 8]]
MAX_TOKENS = 8


def load_model(folder: str) -> Any:
    """The model in ``folder`` in float32, as the servers compute it."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def train_a_little(model: Any, steps: int = 3, lr: float = 0.02, seed: int = 0) -> Any:
    """A few real AdamW steps of language modelling on fixed random tokens: new weights,
    different greedy outputs, the way a trainer changes them."""
    generator = torch.Generator().manual_seed(seed)
    batch = torch.randint(0, model.config.vocab_size, (4, 24), generator=generator)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def hf_greedy(model: Any, prompt: list[int]) -> list[int]:
    """transformers' own greedy continuation of ``prompt``."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=MAX_TOKENS,
                             do_sample=False)
    return [int(token) for token in out[0, len(prompt):]]


def server_greedy(base_url: str, model_name: str, prompt: list[int]) -> tuple[list[int], Any]:
    """The server's greedy continuation of ``prompt`` and the policy version it reports."""
    with openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0, timeout=60.0) as client:
        response = client.completions.create(model=model_name, prompt=prompt, max_tokens=MAX_TOKENS,
                                             temperature=0, extra_body={"return_token_ids": True})
    body = response.model_dump()
    return [int(token) for token in body["choices"][0]["token_ids"]], body.get("policy_version")


def all_greedy(base_url: str, model_name: str) -> list[list[int]]:
    return [server_greedy(base_url, model_name, prompt)[0] for prompt in PROMPTS]


def with_turn_rewards(row: TrajectoryRow, rewards: list[float]) -> TrajectoryRow:
    """The row's first two turns, paid ``rewards``: a two-turn episode, whatever it played."""
    cut = row.turns[1].end
    messages = row.messages[:5]  # system, level, turn 0, reply, turn 1
    return row.model_copy(update={"completion_ids": row.completion_ids[:cut], "logprobs": row.logprobs[:cut],
                                  "turns": row.turns[:2],
                                  "completion_mask": row.completion_mask[:cut], "turn_rewards": rewards,
                                  "reward": sum(rewards), "num_turns": 2, "messages": messages})


def make_learner(learner: type, config: Any, dist: Any = None) -> Any:
    """``learner`` on ``config``'s backend, its settings checked as a run checks them (a learner class the
    registry may not know: a test's subclass)."""
    from agentgym.trainers.engines.distributed import Dist
    from agentgym.trainers.registry import check_settings, engine_class

    check_settings(config)
    engine = engine_class(config.run.backend)(config, dist if dist is not None else Dist(), head=learner.head)
    return learner(config, engine)


def keep_current_as_reference(engine: Any, folder: Any) -> None:
    """The engine's weights as they are now become its reference, as the run loop keeps them (an export)."""
    engine.export(folder)
    engine.keep_reference(folder)


def learn(learner: Any, rows: Any) -> dict[str, float]:
    """One training step as the run loop takes it: the learner's step, then its end (the schedule moves
    on; the policy version goes up when the step learned)."""
    metrics = learner.train_step(rows)
    learner.finish_step(trained=metrics.get("updates", 0.0) > 0)
    return metrics

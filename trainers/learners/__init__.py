"""The learners: what each trainer does with a step's rows.

One module a trainer (grpo, ppo, dpo, sft, distill), each a
:class:`~agentgym.trainers.learners.base.Learner` on an engine; the run loop
(:mod:`agentgym.trainers.loop`) calls ``train_step(rows)`` and does everything else.
"""

__all__: list[str] = []

"""The losses and advantages: small pure functions of tensors, shared by every learner and backend.

Each is tested on numbers worked by hand (tests/trainers/losses/), so the backends cannot drift
apart: advantages, the policy loss, KL estimators, PPO's value side (GAE, the clipped value
loss), preference losses (DPO, IPO) and distillation's KLs.
"""

__all__: list[str] = []

"""The engines (backends): how a learner's numbers are computed.

:class:`~agentgym.trainers.engines.base.Engine` is what a learner calls (logprobs, backward,
step, weights, state); :mod:`~agentgym.trainers.engines.native` is native PyTorch (FSDP2 under
torchrun), :mod:`~agentgym.trainers.engines.trl` the TRL stack through its public API. Beside
them: the process group and sharding, the optimiser, LoRA merging, PPO's value model, and the
micro-batch layout both engines read.
"""

__all__: list[str] = []

"""The native PyTorch backend: FSDP2 under torchrun, a plain module in one process
(:mod:`~agentgym.trainers.fsdp.engine`)."""

from agentgym.trainers.fsdp.distributed import Dist, init_distributed

__all__ = ["Dist", "init_distributed"]

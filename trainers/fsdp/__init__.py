"""The native PyTorch trainer: FSDP2 under torchrun, a plain module in one process."""

from agentgym.trainers.fsdp.distributed import Dist, init_distributed
from agentgym.trainers.fsdp.trainer import FSDPTrainer

__all__ = ["Dist", "FSDPTrainer", "init_distributed"]

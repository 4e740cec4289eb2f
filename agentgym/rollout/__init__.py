"""Playing episodes: policies and episode records."""

from agentgym.rollout.episode import EpisodeRecord, TurnRecord, play_episode
from agentgym.rollout.policies import (
    ExpertCorrection,
    NoisyExpert,
    PlayOnly,
    Policy,
    RandomPolicy,
    ScriptedPolicy,
)

__all__ = ["EpisodeRecord", "ExpertCorrection", "NoisyExpert", "PlayOnly", "Policy", "RandomPolicy",
           "ScriptedPolicy", "TurnRecord", "play_episode"]

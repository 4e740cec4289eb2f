"""Playing episodes: policies and episode records."""

from agentgym.rollout.episode import EpisodeRecord, TurnRecord, play_episode
from agentgym.rollout.policies import NoisyExpert, PlayOnly, Policy, RandomPolicy, ScriptedPolicy

__all__ = ["EpisodeRecord", "NoisyExpert", "PlayOnly", "Policy", "RandomPolicy", "ScriptedPolicy", "TurnRecord", "play_episode"]

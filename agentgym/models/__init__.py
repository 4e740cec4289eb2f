"""Models without a hub: the tiny local model family, and resolving model names."""

from agentgym.models.tiny import TinySpec, build_tiny_model, check_model_name, resolve_model, tiny_spec

__all__ = ["TinySpec", "build_tiny_model", "check_model_name", "resolve_model", "tiny_spec"]

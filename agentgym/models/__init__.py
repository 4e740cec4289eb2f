"""Models by name: the tiny local model family, real models built without a hub, resolving names."""

from agentgym.models.named import NAMED_MODELS, NamedModel
from agentgym.models.resolve import check_model_name, resolve_model
from agentgym.models.tiny import TinySpec, build_tiny_model, cache_root, tiny_spec

__all__ = ["NAMED_MODELS", "NamedModel", "TinySpec", "build_tiny_model", "cache_root", "check_model_name",
           "resolve_model", "tiny_spec"]

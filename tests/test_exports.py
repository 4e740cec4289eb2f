"""The public names are the ones we mean to export (httpx's test_exported_members)."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

import agentgym

import pkgutil

import agentgym.cli
import agentgym.models
import agentgym.rollout
import agentgym.envs.code
import agentgym.envs.external
import agentgym.envs.math
import agentgym.envs.reasoning
import agentgym.envs.retrieval
import agentgym.envs.web
import agentgym.interop
import agentgym.rewards
import agentgym.sandbox
import agentgym.serve
import agentgym.tools
import agentgym.trainers
import agentgym.trainers.engines
import agentgym.trainers.learners
import agentgym.trainers.loop
import agentgym.trainers.losses
import agentgym.trainers.research

_CORE = ["agentgym", "agentgym.core", "agentgym.errors", "agentgym.moves", "agentgym.parsing",
         "agentgym.registry", "agentgym.spaces", "agentgym.vector"]
# Every module of the packages below, found rather than listed, so a new one is covered.
_PACKAGES = [agentgym.cli, agentgym.models, agentgym.rollout, agentgym.sandbox, agentgym.serve,
             agentgym.tools,
             agentgym.rewards, agentgym.interop, agentgym.envs.external, agentgym.envs.code, agentgym.envs.math,
             agentgym.envs.reasoning, agentgym.envs.retrieval, agentgym.envs.web, agentgym.trainers,
             agentgym.trainers.engines, agentgym.trainers.learners, agentgym.trainers.loop,
             agentgym.trainers.losses, agentgym.trainers.research]
MODULES = _CORE + [
    info.name for package in _PACKAGES
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + ".")
    if not info.name.endswith("__main__")
]


def _defined_here(module: object) -> set[str]:
    """Public names a module defines itself (def, class, assignment), read from its source."""
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("name", MODULES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    assert _defined_here(module) <= set(module.__all__), "public but not in __all__"
    assert all(hasattr(module, attr) for attr in module.__all__)


def test_top_level_api() -> None:
    assert set(agentgym.__all__) == {
        "AgentGymError", "EnvInfo", "Outcome", "TextEnv", "TextSpace", "__version__",
        "env_info", "extract_answer", "extract_boxed", "list_envs", "load_plugins",
        "make", "make_vec", "register", "split_moves",
    }


def test_every_error_derives_from_the_root() -> None:
    from agentgym import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, (errors.AgentGymError, errors.AgentGymWarning)), name


#: What a user of the trainers reaches for, module by module (the rest of each __all__ may grow).
_TRAINER_API = {
    "agentgym.trainers.loop.run": {"LoopState", "TrainResult", "train"},
    "agentgym.trainers.settings": {"SECTIONS", "TrainConfig"},
    "agentgym.trainers.sections": {"SECTIONS", "Section", "register_section"},
    "agentgym.trainers.learners.base": {"Learner"},
    "agentgym.trainers.learners.minibatch": {"MiniBatchLoop", "even_split"},
    "agentgym.trainers.engines.base": {"Engine", "freeze_parameters", "load_model_and_tokenizer", "lr_factor"},
    "agentgym.trainers.learners.grpo": {"GRPOLearner"},
    "agentgym.trainers.learners.sft": {"SFTLearner", "sft_update"},
    "agentgym.trainers.learners.distill": {"DistillLearner"},
    "agentgym.trainers.learners.dpo": {"DPOLearner", "Pair", "pair_file_rows", "preference_pairs"},
    "agentgym.trainers.learners.ppo": {"PPOLearner"},
    "agentgym.trainers.losses.value": {"explained_variance", "gae", "masked_whiten", "token_gae", "value_loss"},
    "agentgym.trainers.losses.kl": {"kl_k1", "kl_k2", "kl_k3"},
    "agentgym.trainers.engines.critic": {"CRITIC_FILE", "Critic"},
    "agentgym.trainers.losses.distillation": {"forward_kl_full", "forward_kl_top_k", "reverse_kl_sampled", "teacher_top_k"},
    "agentgym.trainers.learners.teachers": {"InProcessTeacher", "ServerTeacher", "TeacherBatch", "make_teacher"},
    "agentgym.trainers.engines.native": {"NativeEngine"},
    "agentgym.trainers.engines.trl": {"TRLEngine"},
    "agentgym.trainers.loop.serving": {"Serving"},
    "agentgym.trainers.loop.sources": {"OfflineGroups", "SFTBatches", "drop_failed", "drop_stale", "trajectory_files"},
    "agentgym.trainers.loop.checkpoint": {"export_checkpoint", "find_checkpoint", "latest_checkpoint", "list_checkpoints",
                                     "load_checkpoint", "save_checkpoint"},
    "agentgym.trainers.registry": {"build_learner", "learner_class", "engine_class", "list_trainers", "register_backend",
                                   "register_trainer", "trainer_spec"},
}


@pytest.mark.parametrize("name", sorted(_TRAINER_API))
def test_the_trainer_layer_exports_its_pieces(name: str) -> None:
    assert _TRAINER_API[name] <= set(importlib.import_module(name).__all__)


@pytest.mark.parametrize("gone", ["agentgym.trainers.trl_backend", "agentgym.trainers.config", "agentgym.trainers.fsdp",
                                  "agentgym.trainers.algorithms", "agentgym.trainers.batch", "agentgym.trainers.grpo",
                                  "agentgym.trainers.engine", "agentgym.trainers.run"])
def test_the_replaced_trainer_modules_are_gone(gone: str) -> None:
    """One run skeleton, one settings module: the old entry points must not linger beside them."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(gone)

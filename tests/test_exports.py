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
import agentgym.trainers.fsdp

_CORE = ["agentgym", "agentgym.core", "agentgym.errors", "agentgym.moves", "agentgym.parsing",
         "agentgym.registry", "agentgym.spaces", "agentgym.vector"]
# Every module of the packages below, found rather than listed, so a new one is covered.
_PACKAGES = [agentgym.cli, agentgym.models, agentgym.rollout, agentgym.sandbox, agentgym.serve,
             agentgym.tools,
             agentgym.rewards, agentgym.interop, agentgym.envs.external, agentgym.envs.code, agentgym.envs.math, agentgym.envs.reasoning,
             agentgym.envs.retrieval, agentgym.envs.web, agentgym.trainers, agentgym.trainers.fsdp]
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
    "agentgym.trainers.run": {"LoopState", "TrainResult", "train"},
    "agentgym.trainers.settings": {"SECTIONS", "TrainConfig"},
    "agentgym.trainers.learner": {"Learner", "build_learner", "engine_class"},
    "agentgym.trainers.engine": {"Engine", "freeze_parameters", "load_model_and_tokenizer", "lr_factor"},
    "agentgym.trainers.grpo": {"GRPOLearner", "make_grpo"},
    "agentgym.trainers.sft": {"SFTBatches", "SFTLearner", "length_grouped_order", "make_sft", "random_batch_order",
                              "sft_passes", "sft_update", "trajectory_files"},
    "agentgym.trainers.distill": {"DistillLearner", "make_distill"},
    "agentgym.trainers.dpo": {"DPOLearner", "Pair", "make_dpo", "pair_file_rows", "preference_pairs"},
    "agentgym.trainers.ppo": {"PPOLearner", "make_ppo"},
    "agentgym.trainers.ppo_losses": {"explained_variance", "gae", "masked_whiten", "token_gae", "value_loss"},
    "agentgym.trainers.critic": {"CRITIC_FILE", "Critic"},
    "agentgym.trainers.distill_losses": {"forward_kl_full", "forward_kl_top_k", "reverse_kl_sampled", "teacher_top_k"},
    "agentgym.trainers.teachers": {"InProcessTeacher", "ServerTeacher", "TeacherBatch", "make_teacher"},
    "agentgym.trainers.fsdp.engine": {"NativeEngine"},
    "agentgym.trainers.trl_engine": {"TRLEngine"},
    "agentgym.trainers.serving": {"Serving"},
    "agentgym.trainers.checkpoint": {"export_checkpoint", "find_checkpoint", "latest_checkpoint", "list_checkpoints",
                                     "load_checkpoint", "save_checkpoint"},
    "agentgym.trainers.registry": {"get_learner_factory", "list_trainers", "register_trainer", "trainer_spec"},
}


@pytest.mark.parametrize("name", sorted(_TRAINER_API))
def test_the_trainer_layer_exports_its_pieces(name: str) -> None:
    assert _TRAINER_API[name] <= set(importlib.import_module(name).__all__)


@pytest.mark.parametrize("gone", ["agentgym.trainers.loop", "agentgym.trainers.trl_backend", "agentgym.trainers.config",
                                  "agentgym.trainers.fsdp.trainer", "agentgym.trainers.fsdp.checkpoint"])
def test_the_replaced_trainer_modules_are_gone(gone: str) -> None:
    """One run skeleton, one settings module: the old entry points must not linger beside them."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(gone)

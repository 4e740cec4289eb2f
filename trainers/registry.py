"""The trainer registry: a trainer's name -> its learner and the backends it runs on; a backend's
name -> its engine.

``agentgym train --trainer NAME --backend BACKEND`` looks them up here. Built in: ``grpo``,
``ppo``, ``dpo``, ``sft``, ``distill`` and ``rm``, each on the backends ``fsdp`` and ``trl``. A learner
is a :class:`~agentgym.trainers.learners.base.Learner` class; the run loop
(:mod:`agentgym.trainers.loop.run`) does everything else, so a trainer is a learner, a loss and
its settings section (:func:`~agentgym.trainers.sections.register_section`).

Learners and engines are named by strings, so registering imports nothing. A third-party
package adds a trainer (or a backend) by calling :func:`register_trainer` (or
:func:`register_backend`), or through the ``agentgym.trainers`` entry-point group, loaded on the
first lookup::

    # the plugin's pyproject.toml
    [project.entry-points."agentgym.trainers"]
    mine = "mytrainers.plugin:register"        # calls register_trainer("mine", ...)

    register_trainer("mine", "mytrainers.learner:MyLearner", backends=("fsdp",), description="...")
"""


from __future__ import annotations

import difflib
import importlib
import re
import warnings
from dataclasses import dataclass
from typing import Any

from agentgym.errors import (
    ConfigError,
    MissingDependencyError,
    PluginLoadWarning,
    RegistryError,
    UnknownTrainerError,
)
from agentgym.registry import load_entry_points

__all__ = [
    "ENTRY_POINT_GROUP",
    "TrainerSpec",
    "build_engine",
    "build_learner",
    "check_settings",
    "engine_class",
    "learner_class",
    "list_trainers",
    "load_trainer_plugins",
    "register_backend",
    "register_trainer",
    "trainer_spec",
]

ENTRY_POINT_GROUP = "agentgym.trainers"
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
#: sections every run reads, whatever the trainer (the loop owns the warm-up, which is off offline)
_ALWAYS = frozenset({"run", "model", "optim", "warmup"})


@dataclass(frozen=True, slots=True)
class TrainerSpec:
    """A registered trainer: its learner (``"module:Class"``), the backends it runs on, what it does."""

    name: str
    learner: str
    backends: tuple[str, ...]
    description: str
    source: str = "agentgym"
    default_backend: str = ""

    def backend(self, chosen: str | None = None) -> str:
        """``chosen`` if the trainer runs on it (None: its default backend)."""
        chosen = chosen or self.default_backend
        if chosen not in self.backends:
            raise ConfigError(f"Trainer {self.name!r} has no backend {chosen!r}; it runs on "
                              f"{', '.join(sorted(self.backends))}. Pass --backend with one of them.")
        return chosen


_TRAINERS: dict[str, TrainerSpec] = {}
#: backend name -> its engine class, ``"module:Class"``
_BACKENDS: dict[str, str] = {}
_LOADED_PLUGINS: set[str] = set()


def register_backend(name: str, engine: str) -> None:
    """Register the backend ``name``, whose engine is the class ``engine`` (``"module:Class"``)."""
    if not _NAME.match(name) or not isinstance(engine, str) or not _ENTRY.match(engine):
        raise ConfigError(f"Backend {name!r} must map to 'module.path:Class', got {engine!r}.")
    if _BACKENDS.get(name, engine) != engine:
        raise RegistryError(f"Backend {name!r} is registered already as {_BACKENDS[name]}; pick another name.")
    _BACKENDS[name] = engine


def register_trainer(name: str, learner: str, *, backends: tuple[str, ...] | list[str], description: str,
                     default_backend: str | None = None, source: str = "agentgym") -> TrainerSpec:
    """Register ``name``: its learner class (``"module:Class"``) and the backends it runs on (the first,
    unless ``default_backend`` says otherwise, is its default). Registering a name again with another
    learner is an error."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"Trainer name must be lower-case letters, digits, '-' or '_' (e.g. 'grpo'), "
                          f"got {name!r}.")
    if not isinstance(learner, str) or not _ENTRY.match(learner):
        raise ConfigError(f"Trainer {name!r} must name its learner as 'module.path:Class', got {learner!r}.")
    backends = tuple(backends)
    if not backends:
        raise ConfigError(f"Trainer {name!r} needs at least one backend, e.g. backends=('fsdp',).")
    unknown = [backend for backend in backends if backend not in _BACKENDS]
    if unknown:
        raise ConfigError(f"Trainer {name!r}: no backend {unknown[0]!r} is registered; the backends are "
                          f"{', '.join(sorted(_BACKENDS))} (register_backend adds one).")
    existing = _TRAINERS.get(name)
    if existing is not None and existing.learner != learner:
        raise RegistryError(f"Trainer {name!r} is registered already with {existing.learner} (by {existing.source}); "
                            f"{source} tried {learner}. Pick another trainer name.")
    default = default_backend or backends[0]
    if default not in backends:
        raise ConfigError(f"default_backend {default!r} of {name!r} is not one of {list(backends)}.")
    spec = TrainerSpec(name=name, learner=learner, backends=backends, description=description, source=source,
                       default_backend=default)
    _TRAINERS[name] = spec
    return spec


def _suggest(name: str) -> list[str]:
    wanted = str(name).lower()
    if wanted in _TRAINERS:
        return [wanted]
    return difflib.get_close_matches(wanted, list(_TRAINERS), n=3, cutoff=0.5)


def trainer_spec(name: str) -> TrainerSpec:
    """The registered trainer ``name``; :class:`UnknownTrainerError` says what was meant."""
    load_trainer_plugins()
    spec = _TRAINERS.get(name)
    if spec is None:
        raise UnknownTrainerError(name, _suggest(name), sorted(_TRAINERS))
    return spec


def _load(entry: str, what: str) -> Any:
    module_name, _, attribute = entry.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except ImportError as exc:
        raise ConfigError(f"{what} ({entry}) could not be imported: {exc}. Is its package installed (for the "
                          f"built-in ones: {MissingDependencyError.install_hint('train')})?") from exc
    except AttributeError as exc:
        raise ConfigError(f"{what}: {module_name} has no {attribute!r} ({entry}).") from exc


def learner_class(name: str) -> type:
    """The learner class of trainer ``name``."""
    return _load(trainer_spec(name).learner, f"Trainer {name!r}")


def engine_class(backend: str) -> type:
    """The engine class of ``backend`` (fsdp, trl, or a plugin's)."""
    if backend not in _BACKENDS:
        raise ConfigError(f"No backend {backend!r}; the backends are {', '.join(sorted(_BACKENDS))}.")
    return _load(_BACKENDS[backend], f"Backend {backend!r}")


def check_settings(config: Any) -> None:
    """Every name and setting of a run, checked before anything is loaded or started: the trainer and
    its backend (the default one filled in), the learner's own checks, a setting nothing would read,
    each read section against the others."""
    spec = trainer_spec(config.run.trainer)
    config.run.backend = spec.backend(config.run.backend)
    learner = learner_class(spec.name)
    learner.check(config)
    engine = engine_class(config.run.backend)
    config.check_used(set(_ALWAYS | learner.sections | engine.sections), set(learner.unread(config)))


def build_engine(config: Any, dist: Any) -> Any:
    """The engine of ``config``'s backend, its model the head ``config``'s trainer learns with."""
    return engine_class(config.run.backend)(config, dist, head=learner_class(config.run.trainer).head)


def build_learner(config: Any, dist: Any) -> Any:
    """The learner of ``config``'s trainer on its backend's engine (the settings checked first)."""
    check_settings(config)
    return learner_class(config.run.trainer)(config, build_engine(config, dist))


def list_trainers() -> list[TrainerSpec]:
    """Every registered trainer, by name."""
    load_trainer_plugins()
    return [_TRAINERS[name] for name in sorted(_TRAINERS)]


def load_trainer_plugins() -> list[str]:
    """Load the ``agentgym.trainers`` entry points not loaded yet; the names of those that failed.

    A plugin that fails is reported with a :class:`~agentgym.errors.PluginLoadWarning`;
    the other trainers still work.
    """
    failed = []
    for entry, exc in load_entry_points(ENTRY_POINT_GROUP, _LOADED_PLUGINS):
        failed.append(entry.name)
        warnings.warn(f"agentgym trainer plugin {entry.name!r} ({entry.value}) failed to load: "
                      f"{type(exc).__name__}: {exc}. Fix or uninstall that package.",
                      PluginLoadWarning, stacklevel=2)
    return failed


def _register_builtin() -> None:
    register_backend("fsdp", "agentgym.trainers.engines.native:NativeEngine")
    register_backend("trl", "agentgym.trainers.engines.trl:TRLEngine")
    both = ("fsdp", "trl")
    learners = "agentgym.trainers.learners"
    register_trainer("grpo", f"{learners}.grpo:GRPOLearner", backends=both,
                     description="GRPO: roll out, score by group, clipped policy-gradient step, push the weights.")
    register_trainer("ppo", f"{learners}.ppo:PPOLearner", backends=both,
                     description="PPO with a critic (verl's): GAE from a value head or a separate critic, "
                                 "clipped policy and value losses.")
    register_trainer("dpo", f"{learners}.dpo:DPOLearner", backends=both,
                     description="DPO on preference pairs: episodes of a group ranked by reward, or a pairs file.")
    register_trainer("sft", f"{learners}.sft:SFTLearner", backends=("trl", "fsdp"),
                     description="Fine-tune on the successful episodes of rollout files.")
    register_trainer("distill", f"{learners}.distill:DistillLearner", backends=both,
                     description="Distil a teacher: forward KL on rows of a file, or reverse KL on the student's "
                                 "own episodes.")
    register_trainer("rm", f"{learners}.rm:RewardModelLearner", backends=both,
                     description="A reward model (Bradley-Terry) on DPO's pairs of a file; held-out pair accuracy.")


_register_builtin()

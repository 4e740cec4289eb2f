"""The trainer registry: a trainer name and a backend -> the function that builds its learner.

``agentgym train --trainer NAME --backend BACKEND`` looks the pair up here.
Built in: ``grpo``, ``sft`` and ``distill``, each on the backends ``fsdp`` and ``trl``.
An entry point is a function ``make(config, dist) -> Learner`` (see
:mod:`agentgym.trainers.learners.base`); the run skeleton (:mod:`agentgym.trainers.loop.run`)
does everything else, so a trainer is a learner, a loss and its settings.

Entry points are strings, so registering imports nothing. A third-party
package adds a trainer (or a backend of an existing one) by calling
:func:`register_trainer`, or through the ``agentgym.trainers`` entry-point
group, loaded on the first lookup::

    # the plugin's pyproject.toml
    [project.entry-points."agentgym.trainers"]
    dpo = "mytrainers.plugin:register"          # calls register_trainer("dpo", {...})

    register_trainer("dpo", {"fsdp": "mytrainers.dpo:make_dpo"}, description="DPO on preference pairs")
"""

from __future__ import annotations

import difflib
import importlib
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
    "TrainerFn",
    "TrainerSpec",
    "get_learner_factory",
    "list_trainers",
    "load_trainer_plugins",
    "register_trainer",
    "trainer_spec",
]

ENTRY_POINT_GROUP = "agentgym.trainers"
#: What a trainer's entry point is: ``make(config, dist) -> Learner``.
TrainerFn = Callable[..., Any]
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True, slots=True)
class TrainerSpec:
    """A registered trainer: its backends (name -> ``"module:function"``) and what it does."""

    name: str
    backends: dict[str, str]
    description: str
    source: str = "agentgym"
    default_backend: str = field(default="")

    def entry_point(self, backend: str | None = None) -> str:
        """The entry point of ``backend`` (None: the default one)."""
        chosen = backend or self.default_backend
        if chosen not in self.backends:
            raise ConfigError(f"Trainer {self.name!r} has no backend {chosen!r}; it runs on "
                              f"{', '.join(sorted(self.backends))}. Pass --backend with one of them.")
        return self.backends[chosen]


_TRAINERS: dict[str, TrainerSpec] = {}
_LOADED_PLUGINS: set[str] = set()


def register_trainer(name: str, backends: Mapping[str, str], *, description: str,
                     default_backend: str | None = None, source: str = "agentgym") -> TrainerSpec:
    """Register ``name`` with its backends' entry points (``"module:function"``).

    Registering a name again adds its new backends; giving an existing backend
    another entry point is an error. The default backend is the first one
    registered unless ``default_backend`` says otherwise.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"Trainer name must be lower-case letters, digits, '-' or '_' (e.g. 'grpo'), "
                          f"got {name!r}.")
    if not backends:
        raise ConfigError(f"Trainer {name!r} needs at least one backend, e.g. {{'trl': 'pkg.mod:run'}}.")
    for backend, entry in backends.items():
        if not _NAME.match(backend) or not isinstance(entry, str) or not _ENTRY.match(entry):
            raise ConfigError(f"Trainer {name!r}: backend {backend!r} must map to 'module.path:function', "
                              f"got {entry!r}.")
    existing = _TRAINERS.get(name)
    merged = dict(existing.backends) if existing else {}
    for backend, entry in backends.items():
        if merged.get(backend, entry) != entry:
            raise RegistryError(
                f"Trainer {name!r} backend {backend!r} is registered already as {merged[backend]} "
                f"(by {existing.source if existing else source}); {source} tried {entry}. "
                "Pick another backend or trainer name.")
        merged[backend] = entry
    default = default_backend or (existing.default_backend if existing else next(iter(backends)))
    if default not in merged:
        raise ConfigError(f"default_backend {default!r} of {name!r} is not one of {sorted(merged)}.")
    spec = TrainerSpec(name=name, backends=merged, source=existing.source if existing else source,
                       description=existing.description if existing else description, default_backend=default)
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


def get_learner_factory(name: str, backend: str | None = None) -> TrainerFn:
    """The function that builds trainer ``name``'s learner on ``backend`` (None: its default backend).

    >>> make = get_learner_factory("grpo", "trl")   # doctest: +SKIP
    >>> learner = make(config, dist)                 # doctest: +SKIP
    """
    entry = trainer_spec(name).entry_point(backend)
    module_name, _, attribute = entry.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except ImportError as exc:
        raise ConfigError(f"Trainer {name!r} ({entry}) could not be imported: {exc}. Is its package "
                          f"installed (for the built-in ones: {MissingDependencyError.install_hint('train')})?") from exc
    except AttributeError as exc:
        raise ConfigError(f"Trainer {name!r}: {module_name} has no {attribute!r} ({entry}).") from exc
    if not callable(function):
        raise ConfigError(f"Trainer {name!r}: {entry} is not a function.")
    return function


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
    register_trainer("grpo", {"fsdp": "agentgym.trainers.learners.grpo:make_grpo", "trl": "agentgym.trainers.learners.grpo:make_grpo"},
                     description="GRPO: roll out, score by group, clipped policy-gradient step, push the weights.")
    register_trainer("dpo", {"fsdp": "agentgym.trainers.learners.dpo:make_dpo", "trl": "agentgym.trainers.learners.dpo:make_dpo"},
                     description="DPO on preference pairs: episodes of a group ranked by reward, or a pairs file.")
    register_trainer("sft", {"trl": "agentgym.trainers.learners.sft:make_sft", "fsdp": "agentgym.trainers.learners.sft:make_sft"},
                     description="Fine-tune on the successful episodes of rollout files.")
    register_trainer("distill", {"fsdp": "agentgym.trainers.learners.distill:make_distill",
                                 "trl": "agentgym.trainers.learners.distill:make_distill"},
                     description="Distil a teacher: forward KL on rows of a file, or reverse KL on the student's "
                                 "own episodes.")
    register_trainer("ppo", {"fsdp": "agentgym.trainers.learners.ppo:make_ppo", "trl": "agentgym.trainers.learners.ppo:make_ppo"},
                     default_backend="fsdp",
                     description="PPO with a critic (verl's): GAE from a value head or a separate critic, "
                                 "clipped policy and value losses.")


_register_builtin()

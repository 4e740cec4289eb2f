"""The env registry: Gymnasium's, plus metadata and friendlier lookups.

:func:`register` records an :class:`EnvInfo` (family, tags, description, what
the env needs) and registers the id with :func:`gymnasium.register`, so
``gym.make(id)`` works. :func:`make` and :func:`env_info` answer a misspelt id
with "did you mean". Entry points are strings: registering imports nothing.

Third-party packages add envs through the ``agentgym.envs`` entry-point group
(Gymnasium 1.x no longer loads plugins itself). Each entry point names a
function that calls :func:`register`, or a module that does so on import::

    # the plugin's pyproject.toml
    [project.entry-points."agentgym.envs"]
    mygames = "mygames.agentgym_plugin:register_envs"

``import agentgym`` loads them all; a plugin that fails is reported with a
:class:`~agentgym.errors.PluginLoadWarning` and in :func:`plugin_failures`,
and the other envs still work.

Envs from outside are reached through a *source*: ``openenv:http://127.0.0.1:8000``
or ``verifiers:NAME`` is an id wherever one is taken (:func:`make`, :func:`env_info`,
``--env``). :func:`register_source` names the scheme, the Gymnasium id that plays it and
the constructor argument the rest of the id fills; :func:`list_sources` lists them.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata
import inspect
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym.errors import ConfigError, DuplicateEnvError, PluginLoadWarning, UnknownEnvError

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvInfo",
    "EnvSource",
    "env_arguments",
    "env_argument_error",
    "KNOWN_NEEDS",
    "PluginFailure",
    "env_info",
    "list_envs",
    "list_sources",
    "load_entry_points",
    "load_plugins",
    "make",
    "plugin_failures",
    "register",
    "register_source",
    "suggest",
]

ENTRY_POINT_GROUP = "agentgym.envs"
#: What an env may need beyond the base install (shown by ``agentgym list``).
KNOWN_NEEDS = frozenset({"docker", "network", "dataset", "gpu", "model"})
_ID_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*(?:-[A-Za-z0-9_.]+)*-v\d+$")


@dataclass(frozen=True, slots=True)
class EnvInfo:
    """What ``agentgym list`` shows about one registered env."""

    id: str
    entry_point: str
    family: str
    description: str
    tags: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    source: str = "agentgym"
    #: the extra of pyproject.toml the env cannot run without (``scripts/setup.sh EXTRA``), if any
    extra: str | None = None


@dataclass(frozen=True, slots=True)
class EnvSource:
    """A scheme of ids for envs from outside: ``SCHEME:REST`` makes ``gym_id`` with
    ``argument=REST`` (``openenv:URL`` makes ``OpenEnv-LLM-v0`` with ``base_url=URL``)."""

    scheme: str
    gym_id: str
    entry_point: str
    argument: str
    description: str
    #: how an id of this scheme is written, for ``agentgym list`` (``openenv:URL``)
    example: str
    tags: tuple[str, ...] = ()
    extra: str | None = None


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """A plugin entry point that raised while loading."""

    name: str
    value: str
    error: str


_ENVS: dict[str, EnvInfo] = {}
_SOURCES: dict[str, EnvSource] = {}
_SCHEME = re.compile(r"^[a-z][a-z0-9_]*$")
_LOADED_PLUGINS: set[str] = set()
_FAILURES: list[PluginFailure] = []
_source = "agentgym"


def register(
    id: str,  # noqa: A002 - the name Gymnasium uses
    entry_point: str,
    *,
    family: str,
    description: str,
    tags: tuple[str, ...] | list[str] = (),
    needs: tuple[str, ...] | list[str] = (),
    kwargs: Mapping[str, Any] | None = None,
    extra: str | None = None,
) -> EnvInfo:
    """Register an env under ``id`` (``Name-LLM-vN``) with its metadata.

    ``needs`` names what the env needs from the machine (:data:`KNOWN_NEEDS`);
    ``extra`` the optional dependencies it cannot run without (``"math"``:
    ``scripts/setup.sh math``), both shown by ``agentgym list``.

    Registering the same id with the same entry point again is a no-op, so a
    module may be imported twice; a different entry point is an error.
    """
    if not _ID_PATTERN.match(id):
        raise ConfigError(
            f"Env id {id!r} is not of the form Name-vN (agentgym uses Name-LLM-vN, "
            "e.g. 'Sokoban-LLM-v0')."
        )
    if ":" not in entry_point:
        raise ConfigError(
            f"entry_point must be 'module.path:ClassName', got {entry_point!r} for {id!r}."
        )
    unknown = set(needs) - KNOWN_NEEDS
    if unknown:
        raise ConfigError(f"needs of {id!r} has {sorted(unknown)}; known: {sorted(KNOWN_NEEDS)}.")
    info = EnvInfo(
        id=id,
        entry_point=entry_point,
        family=family,
        description=description,
        tags=tuple(tags),
        needs=tuple(needs),
        kwargs=dict(kwargs or {}),
        source=_source,
        extra=extra,
    )
    existing = _ENVS.get(id)
    if existing is not None:
        if existing.entry_point == entry_point:
            return existing
        raise DuplicateEnvError(
            f"{id!r} is registered already by {existing.source} as {existing.entry_point}; "
            f"{info.source} tried to register it as {entry_point}. Pick another id or version."
        )
    gym.register(id=id, entry_point=entry_point, kwargs=dict(info.kwargs))
    _ENVS[id] = info
    return info


def register_source(
    scheme: str,
    gym_id: str,
    entry_point: str,
    *,
    argument: str,
    description: str,
    example: str,
    tags: tuple[str, ...] | list[str] = (),
    extra: str | None = None,
) -> EnvSource:
    """Make ``SCHEME:REST`` an env id: the env ``entry_point`` built with ``argument=REST``.

    ``gym_id`` is registered with Gymnasium too (not in :func:`list_envs`, since it needs
    its argument), so ``gym.make("agentgym:" + gym_id, **{argument: REST})`` works without
    agentgym's own :func:`make`. Registering the same source again is a no-op.
    """
    if not _SCHEME.match(scheme):
        raise ConfigError(f"A source scheme is lower-case letters, digits and _, got {scheme!r}.")
    source = EnvSource(scheme, gym_id, entry_point, argument, description, example, tuple(tags), extra)
    existing = _SOURCES.get(scheme)
    if existing is not None and existing != source:
        raise DuplicateEnvError(f"The source {scheme!r} is registered already as {existing.entry_point}.")
    if existing is None:
        gym.register(id=gym_id, entry_point=entry_point)
        _SOURCES[scheme] = source
    return source


def list_sources() -> list[EnvSource]:
    """The registered sources of envs from outside, by scheme."""
    return sorted(_SOURCES.values(), key=lambda source: source.scheme)


def _split_source(env_id: str) -> tuple[EnvSource, str] | None:
    """``(source, rest)`` when ``env_id`` is ``SCHEME:REST`` of a registered source."""
    scheme, sep, rest = env_id.partition(":")
    source = _SOURCES.get(scheme) if sep else None
    if source is None:
        return None
    if not rest.strip():
        raise ConfigError(f"{env_id!r} names no env after {scheme}:; write it as {source.example}.")
    return source, rest.strip()


def _source_info(env_id: str, source: EnvSource, rest: str) -> EnvInfo:
    return EnvInfo(id=env_id, entry_point=source.entry_point, family=source.scheme,
                   description=source.description, tags=source.tags, kwargs={source.argument: rest},
                   source=source.scheme, extra=source.extra)


def suggest(env_id: str, limit: int = 3) -> list[str]:
    """Registered ids close to ``env_id``, case-insensitively."""
    scheme, sep, rest = env_id.partition(":")
    if sep and scheme not in _SOURCES and scheme != "agentgym":
        close = difflib.get_close_matches(scheme.lower(), list(_SOURCES), n=1, cutoff=0.6)
        if close:
            return [f"{close[0]}:{rest}"]
    by_lower = {known.lower(): known for known in _ENVS}
    wanted = env_id.lower()
    if wanted in by_lower:
        return [by_lower[wanted]]
    close = difflib.get_close_matches(wanted, by_lower, n=limit, cutoff=0.6)
    if not close:
        stem = wanted.split("-")[0]
        close = [low for low in by_lower if stem and low.startswith(stem)][:limit]
    return [by_lower[low] for low in close]


def env_info(env_id: str) -> EnvInfo:
    """The metadata of ``env_id``; :class:`UnknownEnvError` says what was meant."""
    split = _split_source(env_id)
    if split is not None:
        return _source_info(env_id, *split)
    info = _ENVS.get(env_id)
    if info is None:
        raise UnknownEnvError(env_id, suggest(env_id))
    return info


def list_envs(*, family: str | None = None, tag: str | None = None) -> list[EnvInfo]:
    """Registered envs sorted by family then id, optionally filtered."""
    envs = [
        info
        for info in _ENVS.values()
        if (family is None or info.family == family) and (tag is None or tag in info.tags)
    ]
    return sorted(envs, key=lambda info: (info.family, info.id))


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for agentgym ids, with "did you mean" for a misspelt id; an id of a
    source (``openenv:URL``) makes the source's env with the rest of the id as its argument."""
    split = _split_source(env_id)
    if split is not None:
        source, rest = split
        if source.argument in kwargs:
            raise ConfigError(f"{env_id} sets {source.argument} already; leave -k {source.argument}= out.")
        return gym.make(source.gym_id, **{source.argument: rest}, **kwargs)
    env_info(env_id)
    return gym.make(env_id, **kwargs)


def env_arguments(env_id: str) -> dict[str, Any] | None:
    """The constructor arguments of ``env_id``'s class and their defaults, read from its
    ``__init__`` signature (None when the class takes ``**kwargs`` or cannot be read)."""
    module, _, name = env_info(env_id).entry_point.partition(":")
    try:
        target = getattr(importlib.import_module(module), name)
        signature = inspect.signature(target)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    arguments: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            arguments[parameter.name] = parameter.default
    return arguments


def env_argument_error(env_id: str, kwargs: Mapping[str, Any], exc: Exception) -> ConfigError:
    """The :class:`ConfigError` for an env that refused its constructor arguments.

    ``exc`` is what the constructor raised: a TypeError (an argument it does not
    take: the message lists those it does) or a ValueError (a value it cannot use).
    """
    arguments = env_arguments(env_id)
    accepted = "" if arguments is None else "; it takes " + ", ".join(
        name if default is inspect.Parameter.empty else f"{name}={default!r}" for name, default in arguments.items())
    unknown = [key for key in kwargs if arguments is not None and key not in arguments]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(arguments or {}), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return ConfigError(f"{env_id} has no argument {unknown[0]!r}{hint}{accepted}.")
    given = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
    reason = str(exc).split(" was raised from the environment creator")[0]  # Gymnasium's suffix
    return ConfigError(f"{env_id} cannot use {given or 'its default arguments'}: {reason}{accepted}.")


@contextlib.contextmanager
def _registering_as(source: str) -> Iterator[None]:
    global _source
    previous, _source = _source, source
    try:
        yield
    finally:
        _source = previous


def load_entry_points(
    group: str,
    loaded: set[str],
    wrap: Callable[[importlib.metadata.EntryPoint], contextlib.AbstractContextManager[object]] | None = None,
) -> Iterator[tuple[importlib.metadata.EntryPoint, Exception]]:
    """Load each entry point of ``group`` not in ``loaded`` yet; yield those that raised.

    An entry point names a function (called) or a module (imported). Each is
    added to ``loaded`` first, so it is tried once per process.
    ``wrap(entry)``, when given, is entered around the loading. A failure is
    yielded as soon as it happens, so the caller reports it before the next
    plugin loads. The env and trainer registries both load their plugins so.
    """
    for entry in importlib.metadata.entry_points(group=group):
        key = f"{entry.name}={entry.value}"
        if key in loaded:
            continue
        loaded.add(key)
        try:
            with wrap(entry) if wrap is not None else contextlib.nullcontext():
                target = entry.load()
                if callable(target):
                    target()
        # A third-party plugin may fail in any way at all; that must not stop
        # `import agentgym` or hide what every other package registered.
        except Exception as exc:  # noqa: BLE001
            yield entry, exc


def load_plugins() -> list[PluginFailure]:
    """Load every ``agentgym.envs`` entry point not loaded yet; return the new failures."""
    failures = []
    for entry, exc in load_entry_points(ENTRY_POINT_GROUP, _LOADED_PLUGINS,
                                        lambda entry: _registering_as(f"plugin {entry.name}")):
        failure = PluginFailure(entry.name, entry.value, f"{type(exc).__name__}: {exc}")
        failures.append(failure)
        warnings.warn(
            f"agentgym plugin {entry.name!r} ({entry.value}) failed to load and its envs "
            f"are not registered: {failure.error}. Fix or uninstall that package.",
            PluginLoadWarning,
            stacklevel=2,
        )
    _FAILURES.extend(failures)
    return failures


def plugin_failures() -> list[PluginFailure]:
    """Every plugin that failed to load in this process."""
    return list(_FAILURES)

"""A training run's settings: one section per part of the run, each registered by the part that reads it.

    config = TrainConfig.from_dict({"run": {"steps": 80}, "optim": {"lr": 5e-4}})
    config = TrainConfig().updated({"lr": 5e-4, "rollout.group_size": 4})   # flat names work too
    config.save_yaml(Path(config.run.out) / "config.yaml")

| section | registered by (and read by) | holds |
| --- | --- | --- |
| ``run``, ``server``, ``rollout``, ``warmup`` | :mod:`agentgym.trainers.loop.settings` | the run, the server and weight push, what a step plays, the format warm-up |
| ``model``, ``optim``, ``native`` | :mod:`agentgym.trainers.engines.settings` | the model and its precision, the optimiser and the passes of a step, the native backend |
| ``loss`` | :mod:`agentgym.trainers.losses.settings` | the clipped policy loss and its KL (grpo, ppo, distill) |
| ``grpo``, ``ppo``, ``dpo``, ``sft``, ``distill`` | :mod:`agentgym.trainers.learners.settings` | each learner's own |
| ``experimental`` | :mod:`agentgym.trainers.research.settings` | options that lost their comparisons, off the main path |

A plugin trainer adds its section with :func:`~agentgym.trainers.sections.register_section`.
Each setting has one name, unique across sections, so ``-s lr=5e-4`` and ``-s optim.lr=5e-4``
mean the same. A setting's help is its docstring (pydantic reads attribute docstrings):
``agentgym train --settings`` and docs/training.md show them, never written twice. A setting the
chosen trainer or backend would ignore is an error that names it (:meth:`TrainConfig.check_used`),
and each section read checks itself against the others then (:meth:`Section.check`).
"""

from __future__ import annotations

import difflib
import importlib
import zlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentgym.errors import ConfigError
from agentgym.rollout.seeds import read_seeds
from agentgym.trainers.sections import SECTIONS, Section, section_of

__all__ = ["SECTIONS", "TrainConfig", "setting_help", "setting_rows", "settings_markdown"]



def _register_builtin_sections() -> None:
    """Import the modules that register the built-in sections, in the order help and docs show them
    (each is as light as pydantic: the command line reads them)."""
    modules = [f"agentgym.trainers.{part}.settings" for part in ("loop", "engines", "losses", "learners", "research")]
    for module in modules:
        importlib.import_module(module)
    # A test or a plugin may import one of these modules first, which registers its sections first:
    # order the built-in ones as listed (plugins after them, each module's in its own order), so help
    # and the docs' table read the same whatever was imported when.
    rank = {module: index for index, module in enumerate(modules)}
    ordered = sorted(SECTIONS.items(), key=lambda item: rank.get(item[1].__module__, len(rank)))
    SECTIONS.clear()
    SECTIONS.update(ordered)


_register_builtin_sections()

#: settings that moved to another section (old section -> names), so saved runs still load
_MOVED_FROM = {"grpo": frozenset({"clip_low", "clip_high", "aggregation", "constant_sum_tokens", "kl_coef",
                                  "correction", "correction_level", "correction_cap", "top_entropy_quantile"}),
               "native": frozenset({"micro_batch_tokens"})}


class TrainConfig:
    """Every setting of a training run, one attribute per section (``config.optim.lr``)."""

    def __init__(self, **sections: Any) -> None:
        unknown = sorted(set(sections) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"Unknown settings section {unknown[0]!r}; the sections are {', '.join(SECTIONS)}.")
        values: dict[str, Section] = {}
        for name, model in SECTIONS.items():
            given = sections.get(name) or {}
            try:
                values[name] = given if isinstance(given, model) else model(**given)
            except ValidationError as exc:  # one line that names the setting, not pydantic's report
                raise ConfigError(_first_error(exc, name)) from None
        object.__setattr__(self, "_sections", values)
        rollout = values["rollout"]
        if rollout.env_id is None and rollout.trajectories is None:  # every run, whatever reads what
            raise ConfigError("Give an env to train on (--env ENV) or a rollout file (--trajectories FILE).")
        if values["optim"].mini_batches > rollout.episodes_per_step:
            raise ConfigError(f"mini_batches ({values['optim'].mini_batches}) cannot exceed episodes_per_step "
                              f"({rollout.episodes_per_step}).")

    def __getattr__(self, name: str) -> Section:
        try:
            return self.__dict__["_sections"][name]
        except KeyError:
            raise AttributeError(f"TrainConfig has no section {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("set a setting through its section (config.run.backend = ...), or build a new "
                             "TrainConfig with updated()")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrainConfig) and self.model_dump() == other.model_dump()

    def __repr__(self) -> str:
        return f"TrainConfig({self.model_dump()!r})"

    def model_dump(self, mode: str = "python") -> dict[str, dict[str, Any]]:
        """Every section's settings, by section (``mode="json"``: JSON-safe values)."""
        return {name: section.model_dump(mode=mode) for name, section in self._sections.items()}

    # -- reading and writing ------------------------------------------------------

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Settings from a mapping: sections (``{"optim": {"lr": 1e-3}}``), flat names (``{"lr": 1e-3}``,
        as run folders saved them before sections) or dotted ones (``{"optim.lr": 1e-3}``)."""
        if not isinstance(values, dict):
            raise ConfigError(f"Training settings must be a mapping of name: value, got {type(values).__name__}.")
        nested: dict[str, dict[str, Any]] = {}
        values = _from_flat_layout(values)
        for key, value in values.items():
            if key in SECTIONS and isinstance(value, dict):
                for name, item in value.items():
                    moved = name in _MOVED_FROM.get(str(key), ()) and section_of(name) != key
                    _place(nested, name if moved else f"{key}.{name}", item)
            else:
                _place(nested, str(key), value)
        return cls(**nested)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
        """Settings from a YAML file (either layout), then ``overrides`` (flat or dotted names; None
        values are flags not given); settings named in neither keep their defaults."""
        try:
            values = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"Could not read the settings file {str(path)!r}: {exc.strerror}.") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"The settings file {str(path)!r} is not valid YAML: {exc}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"The settings file {str(path)!r} must hold a mapping of name: value.")
        given = {key: value for key, value in (overrides or {}).items() if value is not None}
        return cls.from_dict({**values, **given})

    def updated(self, overrides: dict[str, Any]) -> TrainConfig:
        """A copy with ``overrides`` (flat or dotted names) applied; None values are flags not given."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return type(self).from_dict({**self.model_dump(), **_flat_to_dotted(given)})

    def save_yaml(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False), encoding="utf-8")

    # -- what the parts read ---------------------------------------------------------

    def check_used(self, sections: set[str], ignored: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """Raise when a setting differs from its default but the run would not read it: its section is
        not in ``sections``, or its name is in ``ignored`` (what the trainer and backend leave alone).
        Then each section read checks itself against the others (:meth:`Section.check`)."""
        for section, model in SECTIONS.items():
            values, default = getattr(self, section), model()
            for name in model.model_fields:
                if getattr(values, name) == getattr(default, name):
                    continue
                if section not in sections or name in ignored:
                    raise ConfigError(
                        f"{section}.{name} is set, but trainer {self.run.trainer!r} on backend "
                        f"{self.run.backend!r} does not read the {section} section"
                        f"{'' if section not in sections else ' setting'}; remove it.")
        for section in SECTIONS:
            if section in sections:
                try:
                    getattr(self, section).check(self)
                except ValueError as exc:
                    raise ConfigError(f"{exc}.") from None

    def step_seeds(self, step: int) -> list[int]:
        """The seed of each group of ``step``: new ones every step (a run's start at ``seed * 1_000_003``),
        or the next ones of ``level_seeds``, round and round."""
        per_step = self.rollout.groups_per_step
        groups = range(step * per_step, (step + 1) * per_step)
        if self.rollout.level_seeds is None:
            return [self.run.seed * 1_000_003 + group for group in groups]
        levels = read_seeds(self.rollout.level_seeds)
        return [levels[group % len(levels)] for group in groups]

    def refill_seeds(self, step: int, round: int) -> list[int]:
        """The seed of each group of ``step``'s extra ``round`` (1, 2, ...: dynamic sampling): a hash of the
        run's seed, the step, the round and the group, in [2**31, 2**32) (far from the steps' own seeds, and
        within what any seeding takes); with ``level_seeds``, the level that hash picks."""
        hashes = [zlib.crc32(repr((self.run.seed, step, round, group)).encode())
                  for group in range(self.rollout.groups_per_step)]
        if self.rollout.level_seeds is None:
            return [2**31 + value % 2**31 for value in hashes]
        levels = read_seeds(self.rollout.level_seeds)
        return [levels[value % len(levels)] for value in hashes]


def _place(nested: dict[str, dict[str, Any]], key: str, value: Any) -> None:
    """Put one setting, named flat or dotted, into its section."""
    section, _, name = key.rpartition(".")
    owner = section_of(name)
    if owner is not None and section and section != owner:
        raise ConfigError(f"Setting {key!r}: {name} belongs to section {owner!r}; write {owner}.{name} or just {name}.")
    if owner is None or section not in ("", owner):
        names = {setting: sec for sec, model in SECTIONS.items() for setting in model.model_fields}
        known = [*names, *(f"{s}.{n}" for n, s in names.items())]
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else " agentgym train --settings lists them."
        raise ConfigError(f"Unknown training setting {key!r}.{hint}")
    nested.setdefault(owner, {})[name] = value


def _from_flat_layout(values: dict[str, Any]) -> dict[str, Any]:
    """Run folders saved before sections (2026-11-28) hold flat names. One meaning changed: the flat
    ``max_tokens`` was also constant_sum's divisor, now ``constant_sum_tokens``."""
    sectioned = any(key in SECTIONS and isinstance(value, dict) for key, value in values.items())
    if sectioned or values.get("aggregation") != "constant_sum":
        return values
    return {"constant_sum_tokens": values.get("max_tokens", SECTIONS["rollout"]().max_tokens), **values}


def _flat_to_dotted(values: dict[str, Any]) -> dict[str, Any]:
    return {key if "." in key else f"{section_of(key) or '?'}.{key}": value for key, value in values.items()}


def _first_error(exc: ValidationError, section: str) -> str:
    """One line for the first problem pydantic found: which setting, what came, what is wanted."""
    error = exc.errors()[0]
    where = ".".join([section, *(str(part) for part in error["loc"])])
    got = error.get("input")
    message = error["msg"].removeprefix("Value error, ")
    if not error["loc"]:  # a check across a section's settings
        return f"Settings of {section}: {message}."
    return f"Setting {where}: {message} (got {got!r})."


def setting_help(name: str) -> str:
    """The first sentence of a setting's help (its docstring), for a command-line flag."""
    info = SECTIONS[section_of(name) or ""].model_fields[name]
    text = " ".join((info.description or "").split())
    return text.split(". ")[0].rstrip(".") + "."


def setting_rows() -> list[tuple[str, str, str, str]]:
    """(section, name, default, help) of every setting, for ``--settings`` and docs/training.md."""
    rows = []
    for section, model in SECTIONS.items():
        defaults = model()
        for name, info in model.model_fields.items():
            help_text = " ".join((info.description or "").split())
            rows.append((section, name, _shown(getattr(defaults, name)), help_text))
    return rows


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return "none" if value is None else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def settings_markdown() -> str:
    """The reference table of every setting, as docs/training.md holds it (a test keeps the two equal)."""
    lines = []
    for section, model in SECTIONS.items():
        lines += [f"### `{section}`", "", " ".join((model.__doc__ or "").split()), "",
                  "| setting | default | meaning |", "| --- | --- | --- |"]
        for row_section, name, default, help_text in setting_rows():
            if row_section == section:
                meaning = help_text.replace("``", "`").replace("|", "/")
                lines.append(f"| `{name}` | `{default}` | {meaning} |")
        lines.append("")
    return "\n".join(lines)

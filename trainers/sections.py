"""Settings sections and their registry: each part of a run registers the section it reads.

A section is a pydantic model whose fields are settings, each with its help as an attribute
docstring. The part that reads a section registers it beside its own code (the loop's in
:mod:`agentgym.trainers.loop.settings`, the engines' in :mod:`agentgym.trainers.engines.settings`,
...), and a plugin trainer registers its own the same way::

    class MySettings(Section):
        \"\"\"My trainer: what it reads.\"\"\"

        temperature_bonus: float = 0.0
        \"\"\"Added to every reward.\"\"\"

    register_section("mine", MySettings)

Setting names are unique across sections, so ``-s temperature_bonus=1`` finds its section.
This module imports nothing heavier than pydantic: the command line reads it for its help.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from agentgym.errors import ConfigError, RegistryError

__all__ = ["SECTIONS", "Section", "register_section", "section_of"]


class Section(BaseModel):
    """A settings section: fields are settings, attribute docstrings their help."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True,
                              strict=False)

    def check(self, config: Any) -> None:
        """Checks across sections, once every section is read (``config`` is the whole
        :class:`~agentgym.trainers.settings.TrainConfig`); raise ``ValueError`` with the fix."""


#: section name -> its model, in the order help and docs show them (registration order)
SECTIONS: dict[str, type[Section]] = {}
#: setting name -> the section that owns it
_OWNER: dict[str, str] = {}


def register_section(name: str, model: type[Section]) -> type[Section]:
    """Add the section ``name``; its settings' names must be new. Registering the same model again is a no-op."""
    if SECTIONS.get(name) is model:
        return model
    if not (isinstance(model, type) and issubclass(model, Section)):
        raise ConfigError(f"Section {name!r} must be a subclass of agentgym.trainers.sections.Section.")
    if name in SECTIONS:
        raise RegistryError(f"A settings section named {name!r} is registered already "
                            f"({SECTIONS[name].__qualname__}); choose another name.")
    taken = {field: _OWNER[field] for field in model.model_fields if field in _OWNER}
    if taken:
        field, owner = next(iter(taken.items()))
        raise RegistryError(f"Section {name!r}: setting {field!r} belongs to section {owner!r} already; "
                            "setting names are unique across sections, rename it.")
    SECTIONS[name] = model
    _OWNER.update(dict.fromkeys(model.model_fields, name))
    return model


def section_of(setting: str) -> str | None:
    """The section that owns ``setting`` (None: no such setting)."""
    return _OWNER.get(setting)

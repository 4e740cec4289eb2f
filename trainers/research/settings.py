"""The ``experimental`` section: options that lost their comparisons (see the package's docstring)."""

from __future__ import annotations

from pydantic import Field

from agentgym.trainers.sections import Section, register_section

__all__ = ["ExperimentalSettings"]


class ExperimentalSettings(Section):
    """Options that did not beat their control in docs/log.md; kept working for the runs that use them."""

    filter_uniform_success: bool = False
    """Also leave out groups whose episodes all won or all lost."""
    turn_advantage_weight: float = Field(0.0, ge=0)
    """GiGPO: add this times each turn's advantage against the group's turns that acted on the same
    observation (0: off)."""
    turn_discount: float = Field(0.95, ge=0, le=1)
    """Discount of the return GiGPO's turn advantage compares."""
    negative_advantage_weight: float = Field(1.0, ge=0, le=1)
    """Scale of negative advantages (1: GRPO; 0: learn from the better episodes only)."""
    group_by_length: bool = False
    """SFT: batches of rows of similar length instead of random ones."""


register_section("experimental", ExperimentalSettings)

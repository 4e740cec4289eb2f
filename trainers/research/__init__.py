"""Options that did not beat their control (docs/log.md), kept working for the runs that use them,
off the main path: the ``experimental`` section and the one place that reads it.

- ``filter_uniform_success``: also leave out groups whose episodes all won or all lost.
- GiGPO's turn-level advantage (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM
  Agent Training"): each turn's discounted return against the group's turns taken from the same
  observation, added with ``turn_advantage_weight``. It normalises with the same method as the
  episode-level advantage (``grpo``: by the anchor group's std; ``dr_grpo``: not at all), where
  the paper has a switch of its own.
- ``negative_advantage_weight``: scale the negative advantages only (positive sample
  reinforcement, Zhu et al. 2025, which weights the positive side instead to keep pass@k).
- ``group_by_length``: SFT batches of rows of similar length.

The section is :mod:`~agentgym.trainers.research.settings`; GRPO calls
:func:`~agentgym.trainers.research.options.research_advantages` on its advantages, SFT
:func:`~agentgym.trainers.research.options.sft_order`; nothing else reads the section.
"""

__all__: list[str] = []

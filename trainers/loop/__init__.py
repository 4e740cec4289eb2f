"""The run loop: one skeleton every trainer runs in.

:mod:`~agentgym.trainers.loop.run` is the loop itself; around it, where a step's rows come from
(:mod:`~agentgym.trainers.loop.rollouts`), the server and the weight push
(:mod:`~agentgym.trainers.loop.serving`, :mod:`~agentgym.trainers.loop.sync`), checkpoints,
the time budget, metrics and the HTML report. Nothing here knows the algorithm.
"""

__all__: list[str] = []

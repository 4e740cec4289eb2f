"""Procedurally generated games and puzzles, rendered as text.

Every game builds its level from the seed given to ``reset`` (so the same seed
gives the same level), renders it as text with a legend in the instructions,
truncates at ``max_turns`` and takes keyword arguments for size and difficulty.
"""

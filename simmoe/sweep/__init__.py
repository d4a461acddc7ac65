"""Grids of replays: :mod:`~simmoe.sweep.grid` (the grid, worker processes) and
:mod:`~simmoe.sweep.ray_engine` (the same grid on a Ray cluster)."""

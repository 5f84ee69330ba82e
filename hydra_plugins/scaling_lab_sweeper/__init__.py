"""Hydra sweeper plugin `hydra/sweeper=plan`: scaling-lab sweep plans fanned out through any
Hydra launcher. Hydra only loads plugins from the `hydra_plugins` namespace package."""

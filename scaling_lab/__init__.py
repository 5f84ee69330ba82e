"""The `scaling-lab` command (`scaling_lab.cli`): one entry point over the project's modules."""

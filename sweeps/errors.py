"""The error every sweep module raises for input that cannot be planned (its own module, so the
plan, the rules it reads and the tuning can all raise it without importing each other)."""


class PlanError(ValueError):
    """A sweep config that cannot be planned (conflicting axes, bad field); raised before any work."""

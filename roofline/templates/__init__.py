"""Search templates: the hand-tuned schedules as spaces, constraints, priors and best points."""

from ceiling.roofline.templates.schema import SCHEMA_VERSION, Template

__all__ = ["SCHEMA_VERSION", "Template"]

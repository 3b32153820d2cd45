"""Measurement store views, ceilings, performance models, reports and search templates."""

"""TODO: package docstring."""

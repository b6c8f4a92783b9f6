"""Placeholder: the stand-in site's pytest fixtures (being written)."""

"""Placeholder."""
__all__: list = []

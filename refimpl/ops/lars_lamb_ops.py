"""Placeholder: filled in by this round's work."""
__all__: list = []

"""Placeholder: filled in by this round's work."""
CASES: list = []

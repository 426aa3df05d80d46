"""Placeholder: paddle.static.amp."""

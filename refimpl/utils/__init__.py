"""``paddle.utils``: unique names."""
from refimpl.framework import unique_name

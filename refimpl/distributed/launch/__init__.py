"""``paddle.distributed.launch``: run a script on several ranks (see ``main.py``)."""
from .main import main, paddle_env

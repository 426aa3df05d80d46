"""A test process set up as one trainer of a fleet job, as Paddle's unit tests set themselves up.

(Its own module, not conftest.py: ``tests/conformance`` has a conftest of its own, which a plain
``import conftest`` may find first.)
"""
import os


def as_trainer(monkeypatch, trainer_id=None, endpoints=None, trainers_num=None):
    """Clear the ``PADDLE_*`` / ``TRAINING_ROLE`` environment (monkeypatch puts it back), then set this
    process up as trainer ``trainer_id`` of ``endpoints`` (a comma-separated string) when given."""
    for key in list(os.environ):
        if key.startswith(("PADDLE_", "TRAINING_ROLE")):
            monkeypatch.delenv(key)
    if trainer_id is not None:
        monkeypatch.setenv("PADDLE_TRAINER_ID", str(trainer_id))
        monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", endpoints)
    if trainers_num is not None:
        monkeypatch.setenv("PADDLE_TRAINERS_NUM", str(trainers_num))
    return monkeypatch

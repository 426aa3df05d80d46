"""``paddle.distributed.fleet.layers``: the model-parallel layers (``mpu``), static mode."""

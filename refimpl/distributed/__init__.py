"""``paddle.distributed``: communication, passes, pipeline and data parallelism."""

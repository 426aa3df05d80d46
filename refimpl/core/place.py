"""Places: where a tensor lives.

Mirrors ``paddle.CPUPlace`` and ``paddle.CUDAPlace``. A place is a small value
object; the backend that runs kernels for it is looked up by ``place.backend``
("numpy" for CPU, "cuda" for CUDA), so the executor never branches on places.
"""


class Place:
    backend = "numpy"

    def __eq__(self, other):
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(self.__dict__.items()))))


class CPUPlace(Place):
    backend = "numpy"

    def __repr__(self):
        return "Place(cpu)"


class CUDAPlace(Place):
    backend = "cuda"

    def __init__(self, device_id=0):
        self.device_id = int(device_id)

    def get_device_id(self):
        return self.device_id

    def __repr__(self):
        return f"Place(gpu:{self.device_id})"


def is_cpu(place):
    return isinstance(place, CPUPlace)

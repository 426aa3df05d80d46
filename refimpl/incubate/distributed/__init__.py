"""``paddle.incubate.distributed``: the namespace, so that fleet scripts importing it find it.

Paddle 3.3.1 keeps its older parameter-server fleet here
(``python/paddle/incubate/distributed/fleet/``: its own role makers, fleet
utils, recompute helpers) and ``utils.io``. refimpl implements none of them
(its fleet is ``refimpl.distributed.fleet``): ``import
paddle.incubate.distributed.fleet`` raises ``UnimplementedModule`` under the
import hook and any name asked of this namespace raises Unimplemented naming
``paddle.incubate.distributed.<name>``.
"""
from refimpl.framework import namespace_getattr

__all__ = []

__getattr__ = namespace_getattr(__name__)

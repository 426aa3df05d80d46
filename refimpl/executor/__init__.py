"""Running programs: the Executor, the eager-deletion plan, GC and the event trace."""
from .executor import Executor
from .feed_fetch import check_feed
from .gc_plan import eager_deletion_vars, no_need_buffer_inputs, var_can_be_deleted
from .garbage_collector import GarbageCollector, Memory
from .prepared import PreparedBlock
from .trace import Event, Trace

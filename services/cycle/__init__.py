"""kubus.cycle: the scheduling-cycle service, one active replica per profile.

Run it with ``python -m kubus.cycle --profile NAME [--config SCHED.yaml]``. The protocol it
follows is in `kubus.cycle.service` and docs/services.md (steps 3 and 4), where the parts it is
built from are listed; the node table it keeps equal to Redis in `kubus.cycle.nodes` and
`kubus.cycle.snapshot`; its lease in `kubus.runtime.leasing`.
"""

from kubus.cycle.options import CycleOptions
from kubus.cycle.service import CycleService
from kubus.cycle.snapshot import NodeSnapshot, PlacedPod, SyncStats
from kubus.runtime.leasing import Leadership

__all__ = ["CycleOptions", "CycleService", "Leadership", "NodeSnapshot", "PlacedPod", "SyncStats"]

"""kubus.binder: the binding-cycle service (WaitOnPermit, PreBind, Bind, PostBind).

Run it with ``python -m kubus.binder``; any number of replicas share the work. The protocol it
follows is in `kubus.binder.service` and docs/services.md (step 5).
"""

from kubus.binder.service import AllowAll, BinderOptions, BinderService, BindResult, PermitGate

__all__ = ["AllowAll", "BindResult", "BinderOptions", "BinderService", "PermitGate"]

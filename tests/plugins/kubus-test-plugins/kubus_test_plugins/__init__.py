"""Out-of-tree kubus plugins for kubus's tests, one per kind of extension point: a Filter
(RejectLabeled), a Permit (DenyAnnotated) and a Bind (RecordingBinder) plugin.

Each does nothing unless a label or an annotation asks it to, so enabling them in a profile
changes nothing else.
"""

from __future__ import annotations

import os
from typing import ClassVar

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterResult, Rows
from kubus.framework.status import Code, Status
from kubus.kernels.node_table import TableView

REJECT_LABEL = "test.kubus.io/reject"
"""RejectLabeled rejects the nodes labeled `test.kubus.io/reject=true`."""
REJECT_REASON = "node(s) had label test.kubus.io/reject=true"
DENY_PERMIT_ANNOTATION = "test.kubus.io/deny-permit"
"""DenyAnnotated rejects, at Permit, the pods carrying this annotation (any value)."""
DENY_PERMIT_REASON = "pod is annotated test.kubus.io/deny-permit"
BIND_RECORDER_ANNOTATION = "test.kubus.io/bind-recorder"
"""RecordingBinder binds the pods carrying this annotation (any value) and skips the others."""
BIND_LOG_ENV = "KUBUS_TEST_BIND_LOG"
"""The file RecordingBinder appends `namespace/name node` to, one line per bind."""
SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: RejectLabeled}, {name: DenyAnnotated}, {name: RecordingBinder}]
"""
"""kube's default profile plus the three plugins, each at its extension point (multiPoint)."""


class RejectLabeled:
    """Filter: rejects the nodes labeled test.kubus.io/reject=true, with REJECT_REASON."""

    name: ClassVar[str] = "RejectLabeled"
    placement_sensitive: ClassVar[bool] = False

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        xp = view.xp
        rejected = xp.zeros(view.valid[rows].shape[0], dtype=bool)
        column = view.label(REJECT_LABEL)
        if column is not None:
            value_id = view.table.label_values[REJECT_LABEL].ids.get("true")
            if value_id is not None:
                rejected = column[rows] == value_id
        return FilterResult.single(~rejected, REJECT_REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


class DenyAnnotated:
    """Permit: rejects the pods annotated test.kubus.io/deny-permit; allows the others at once."""

    name: ClassVar[str] = "DenyAnnotated"

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        if DENY_PERMIT_ANNOTATION in pod.metadata.annotations:
            return Status.unschedulable(DENY_PERMIT_REASON), 0.0
        return Status.success(), 0.0


class RecordingBinder:
    """Bind: Skip unless the pod is annotated test.kubus.io/bind-recorder; else appends
    `namespace/name node` to the file $KUBUS_TEST_BIND_LOG (when set) and returns Success."""

    name: ClassVar[str] = "RecordingBinder"

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        if BIND_RECORDER_ANNOTATION not in pod.metadata.annotations:
            return Status.skip()
        log = os.environ.get(BIND_LOG_ENV)
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{pod.key} {node_name}\n")
        return Status.success()


__all__ = [
    "BIND_LOG_ENV",
    "BIND_RECORDER_ANNOTATION",
    "DENY_PERMIT_ANNOTATION",
    "DENY_PERMIT_REASON",
    "REJECT_LABEL",
    "REJECT_REASON",
    "SCHEDULER_CONFIG",
    "DenyAnnotated",
    "RecordingBinder",
    "RejectLabeled",
]

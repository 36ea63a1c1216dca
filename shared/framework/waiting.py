"""The pods waiting on Permit, as plugins see them (kube's framework.Handle: GetWaitingPod,
IterateOverWaitingPods, WaitingPod.Allow/Reject).

`WaitingPods` is the handle a framework gives its plugins' factories. It is a view: its owner
loads it with the pods that wait (the cycle from Redis before each batch's Permit; `kubus
simulate` in memory) and takes back the decisions plugins made (`take_decisions`), to apply them
where the waiting state lives. A decision also updates the view at once, so the next plugin call
in the same batch sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kubus.api.attempts import Attempt
from kubus.framework.podgroups import PodGroups

__all__ = ["Decision", "DecisionKind", "WaitingPods"]


class DecisionKind(Enum):
    ALLOW = "allow"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class Decision:
    """What a plugin said about a waiting pod, to apply where the waiting state lives."""

    kind: DecisionKind
    uid: str
    attempt: Attempt
    plugin: str
    message: str = ""


@dataclass(slots=True)
class _WaitingPod:
    uid: str
    key: str
    node: str
    attempt: Attempt
    pending: set[str]
    owner: WaitingPods
    rejected: str = ""
    group: str = ""
    """The pod group (namespace/name) it belongs to, else empty."""

    @property
    def pending_plugins(self) -> frozenset[str]:
        return frozenset(self.pending)

    def allow(self, plugin: str) -> None:
        if plugin in self.pending:
            self.pending.discard(plugin)
            self.owner._decide(Decision(DecisionKind.ALLOW, self.uid, self.attempt, plugin))

    def reject(self, plugin: str, message: str) -> None:
        if not self.rejected:
            self.rejected = f"{plugin}: {message}"
            self.owner._decide(Decision(DecisionKind.REJECT, self.uid, self.attempt, plugin, message))


@dataclass(slots=True)
class WaitingPods:
    """The waiting pods of one profile (a `kubus.framework.interface.FrameworkHandle`)."""

    _pods: dict[str, _WaitingPod] = field(default_factory=dict)
    _decisions: list[Decision] = field(default_factory=list)
    pod_groups: PodGroups = field(default_factory=PodGroups)
    """The pod groups (gangs) and their member counts, loaded by the owner with the waits."""
    _reserved: dict[str, tuple[str, str]] = field(default_factory=dict)
    """uid -> (group, rejection): pods of a group that passed Reserve and have not reached Permit
    yet. The cycle runs Permit after a whole batch is reserved in Redis, so a later pod's
    PostFilter in the same batch must see (and may reject) the members placed before it, as kube's
    one-pod cycle would have them waiting by then."""

    # -- what plugins call (FrameworkHandle) --------------------------------------------------

    def get_waiting_pod(self, uid: str) -> _WaitingPod | None:
        pod = self._pods.get(uid)
        return pod if pod is not None and not pod.rejected else None

    def iterate_over_waiting_pods(self) -> Sequence[_WaitingPod]:
        return [pod for pod in self._pods.values() if not pod.rejected]

    # -- members between Reserve and Permit (a plugin with state across the two calls) ---------

    def note_reserved(self, uid: str, group: str) -> None:
        """A member of ``group`` passed Reserve; its Permit comes later (`take_reserved`)."""
        self._reserved[uid] = (group, "")

    def forget_reserved(self, uid: str) -> None:
        """The member was unreserved before its Permit."""
        self._reserved.pop(uid, None)

    def reserved_members(self, group: str) -> list[str]:
        """The uids of ``group``'s members between Reserve and Permit, not rejected."""
        return [uid for uid, (g, rejected) in self._reserved.items() if g == group and not rejected]

    def reserved_groups(self) -> set[str]:
        """The groups with members between Reserve and Permit, not rejected."""
        return {g for g, rejected in self._reserved.values() if not rejected}

    def reject_reserved(self, group: str, message: str) -> None:
        """Reject ``group``'s members between Reserve and Permit: their Permit will refuse them."""
        for uid in self.reserved_members(group):
            self._reserved[uid] = (group, message)

    def take_reserved(self, uid: str) -> str:
        """At the member's Permit: forget it; the rejection it got meanwhile, else ""."""
        _, rejected = self._reserved.pop(uid, ("", ""))
        return rejected

    # -- what the owner calls ------------------------------------------------------------------

    def load(self, pods: Iterable[tuple[str, str, str, int, Iterable[str]]]) -> None:
        """Replace the view with these (uid, key, node, attempt, pending plugins)."""
        self._pods = {}
        for uid, key, node, attempt, pending in pods:
            self.add(uid, key, node, attempt, pending)

    def load_states(self, states: Iterable[Any]) -> None:  # Any: kubus.store.PermitState, a layer above
        """Replace the view with these waits (`kubus.store.PermitState`s: uid, key, node,
        attempt, pending, rejected); rejected ones are left out. A new batch starts: members
        between Reserve and Permit are forgotten."""
        self._pods = {}
        self._reserved = {}
        for s in states:
            if not s.rejected:
                self.add(s.uid, s.key, s.node, s.attempt, s.pending, group=getattr(s, "group", ""))

    def add(self, uid: str, key: str, node: str, attempt: Attempt, pending: Iterable[str], *, group: str = "") -> None:
        """A pod that starts waiting now (later Permit calls of the batch see it)."""
        self._pods[uid] = _WaitingPod(uid, key, node, attempt, set(pending), self, group=group)

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def allowed(self, uid: str) -> bool:
        """No plugin holds the pod any more, and none rejected it."""
        pod = self._pods.get(uid)
        return pod is not None and not pod.pending and not pod.rejected

    def rejection(self, uid: str) -> str:
        """``"<plugin>: <message>"`` when a plugin rejected the waiting pod, else ""."""
        pod = self._pods.get(uid)
        return pod.rejected if pod is not None else ""

    def take_decisions(self) -> list[Decision]:
        """The decisions plugins made since the last call, in order."""
        out, self._decisions = self._decisions, []
        return out

    def _decide(self, decision: Decision) -> None:
        self._decisions.append(decision)

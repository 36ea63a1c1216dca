"""What the client talks about: a Kubernetes resource named by group, version and plural, the
resources kubus reads and writes (`PODS`, `NODES`, `BINDINGS`, ...), and their objects
(`KubeObject`: plain dicts)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from kubus.core.codec import JSONObject

__all__ = [
    "BINDINGS",
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "CONFIG_MAPS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "POD_DISRUPTION_BUDGETS",
    "POD_GROUPS",
    "PRIORITY_CLASSES",
    "REPLICATION_CONTROLLERS",
    "REPLICA_SETS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "STATEFUL_SETS",
    "KubeObject",
    "Resource",
]

KubeObject = JSONObject
"""An object of the API as decoded JSON, a plain dict (`kubus.core.codec.JSONObject`)."""


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource of the Kubernetes API: ``group`` ("" for the core group), ``version``,
    ``plural`` (the path segment) and whether its objects live in a namespace. ``kind`` is the
    kind of its objects, for messages and for objects built without one."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of its objects: "v1", "events.k8s.io/v1", ..."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path of the collection, of one object (``name``) or of its ``subresource``.

        A namespaced resource without ``namespace`` is the collection across all namespaces
        (list and watch only). Raises ValueError for a namespace given to a cluster-scoped
        resource or a subresource without a name.
        """
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(f"{self.plural} are cluster-scoped: no namespace")
            prefix = f"{prefix}/namespaces/{quote(namespace, safe='')}"
        path = f"{prefix}/{self.plural}"
        if name is not None:
            path = f"{path}/{quote(name, safe='')}"
        if subresource is not None:
            if name is None:
                raise ValueError(f"{self.plural}/{subresource}: a subresource needs an object's name")
            path = f"{path}/{subresource}"
        return path

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = Resource("", "v1", "pods", True, "Pod")
NODES = Resource("", "v1", "nodes", False, "Node")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
SERVICES = Resource("", "v1", "services", True, "Service")
CONFIG_MAPS = Resource("", "v1", "configmaps", True, "ConfigMap")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", True, "ServiceAccount")
REPLICATION_CONTROLLERS = Resource("", "v1", "replicationcontrollers", True, "ReplicationController")
BINDINGS = Resource("", "v1", "bindings", True, "Binding")
"""The legacy collection (POST namespaces/{ns}/bindings); `KubeClient.bind` POSTs pods/{name}/binding."""
REPLICA_SETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
STATEFUL_SETS = Resource("apps", "v1", "statefulsets", True, "StatefulSet")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets", True, "PodDisruptionBudget")
POD_GROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", True, "PodGroup")
"""scheduler-plugins' Coscheduling CRD: the apiserver serves it once the CRD is installed."""
EVENTS = Resource("events.k8s.io", "v1", "events", True, "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole")
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False, "ClusterRoleBinding")

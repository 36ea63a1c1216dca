"""kubus.kubeapi: an asyncio client of the Kubernetes API (cluster mode's way to the apiserver).

- `kubus.kubeapi.config`: where the cluster is and how to log in (`load_config`: --kubeconfig,
  KUBECONFIG, ~/.kube/config, the in-cluster service account), as kubectl and client-go find it.
- `kubus.kubeapi.client`: `KubeClient` (get, list, watch, create, update, patch, delete, bind)
  over aiohttp, objects as plain dicts decoded by `kubus.core.codec`.
- `kubus.kubeapi.watch`: `Watch`, the stream of `WatchEvent`s that `KubeClient.watch` opens.
- `kubus.kubeapi.resources`: `Resource` and the resources kubus uses (`PODS`, `NODES`, ...).
- `kubus.kubeapi.reflector`: `Reflector`, list + watch kept going through 410s and outages.
- `kubus.kubeapi.errors`: `KubeAPIError` (the apiserver's Status), `KubeUnreachable`.
- `kubus.kubeapi.events`: `pod_event`, an events.k8s.io/v1 Event about a pod as kube-scheduler
  writes it (the watcher's FailedScheduling and Preempted, the binder's Scheduled).
- `kubus.kubeapi.ratelimit`: `TokenBucket`, the client's qps/burst.
"""

from kubus.kubeapi.access import KubeAccessError, check_access
from kubus.kubeapi.client import KubeClient, ObjectList, PatchType
from kubus.kubeapi.config import KubeConfig, KubeConfigError, load_config, load_in_cluster, load_kubeconfig
from kubus.kubeapi.errors import KubeAPIError, KubeError, KubeUnreachable
from kubus.kubeapi.ratelimit import TokenBucket
from kubus.kubeapi.reflector import Backoff, Reflector, ReflectorEvent, Replaced
from kubus.kubeapi.resources import (
    BINDINGS,
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIG_MAPS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    POD_DISRUPTION_BUDGETS,
    POD_GROUPS,
    PODS,
    PRIORITY_CLASSES,
    REPLICA_SETS,
    REPLICATION_CONTROLLERS,
    SERVICE_ACCOUNTS,
    SERVICES,
    STATEFUL_SETS,
    KubeObject,
    Resource,
)
from kubus.kubeapi.watch import EventType, Watch, WatchEvent

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
    "Backoff",
    "EventType",
    "KubeAPIError",
    "KubeAccessError",
    "KubeClient",
    "KubeConfig",
    "KubeConfigError",
    "KubeError",
    "KubeObject",
    "KubeUnreachable",
    "ObjectList",
    "PatchType",
    "Reflector",
    "ReflectorEvent",
    "Replaced",
    "Resource",
    "TokenBucket",
    "Watch",
    "WatchEvent",
    "check_access",
    "load_config",
    "load_in_cluster",
    "load_kubeconfig",
]

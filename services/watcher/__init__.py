"""kubus.watcher: cluster mode's bridge to a kube-apiserver (the Nodes, Pods and the objects
scheduling reads, kept in step with kubus; what kubus decides, reported back).

- `kubus.watcher.service`: WatcherService; ``python -m kubus.watcher`` runs it. Its parts, one
  concern each, composed by the service: `nodes` (NodeMirror), `objects` (ObjectMirror),
  `pods` (PodMirror), `status` (StatusWriter); its settings are `options.WatcherOptions`.
"""

from kubus.watcher.options import WatcherOptions
from kubus.watcher.service import WatcherService, WatcherStartError

__all__ = ["WatcherOptions", "WatcherService", "WatcherStartError"]

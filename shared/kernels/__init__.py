"""kubus.kernels: the node table (structure of arrays) on a numpy or CuPy backend, the NodeInfos it
mirrors, and the seeded tie-break among equal scores. Imports only `kubus.api`, never the framework."""

from kubus.kernels.backend import NUMPY, Backend, BackendUnavailable, select_backend
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo

__all__ = ["NUMPY", "Backend", "BackendUnavailable", "NodeInfo", "NodeTable", "PodInfo", "TableView", "select_backend"]

"""kubus.kernels: the node table (structure of arrays) on a numpy or CuPy backend."""

from kubus.kernels.backend import NUMPY, Backend, BackendUnavailable, select_backend
from kubus.kernels.node_table import NodeTable, TableView

__all__ = ["NUMPY", "Backend", "BackendUnavailable", "NodeTable", "TableView", "select_backend"]

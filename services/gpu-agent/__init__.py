"""kubus.gpu_agent: the node agent (inventory, heartbeat, admission, GPU devices).

Run it with ``python -m kubus.gpu_agent --node NAME`` on a node, or ``--simulate N --template
node.yaml`` for N simulated nodes in one process. The protocol it follows is in
`kubus.gpu_agent.service` and docs/services.md (step 6).
"""

from kubus.gpu_agent.admission import Verdict, admit
from kubus.gpu_agent.assignments import AdmissionResult
from kubus.gpu_agent.inventory import NVML, NodeInventory, host_node, load_node_template, renamed, with_gpus
from kubus.gpu_agent.options import AgentOptions
from kubus.gpu_agent.running import RunningPod
from kubus.gpu_agent.service import AgentService
from kubus.gpu_agent.simulation import MAX_SIMULATED_NODES, pod_duration, simulated_node_names, simulated_nodes

__all__ = [
    "MAX_SIMULATED_NODES",
    "NVML",
    "AdmissionResult",
    "AgentOptions",
    "AgentService",
    "NodeInventory",
    "RunningPod",
    "Verdict",
    "admit",
    "host_node",
    "load_node_template",
    "pod_duration",
    "renamed",
    "simulated_node_names",
    "simulated_nodes",
    "with_gpus",
]

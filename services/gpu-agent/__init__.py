"""kubus.gpu_agent: the node agent (inventory, heartbeat, admission, GPU devices).

The service itself arrives with the services issue; this package exists so the layout,
the import names and the packaging are fixed from the start.
"""

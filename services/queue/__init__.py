"""kubus.queue: the scheduling-queue service (activeQ, backoffQ, unschedulable set).

The service itself arrives with the services issue; this package exists so the layout,
the import names and the packaging are fixed from the start.
"""

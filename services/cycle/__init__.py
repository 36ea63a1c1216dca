"""kubus.cycle: the scheduling-cycle service, one per profile.

The service itself arrives with the services issue; this package exists so the layout,
the import names and the packaging are fixed from the start.
"""

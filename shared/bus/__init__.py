"""The message bus: subject and stream names, NATS connection helpers."""

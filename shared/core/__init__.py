"""The foundations every layer may use: the one JSON codec, kubus's error types, the connection
settings, the per-service metrics registry and the tuned Redis connection."""

"""Monitoring: call-volume series, process samples, health, and the Prometheus export."""

"""What ``agents run-worker examples/deploy/parcel_worker`` loads: ``main:agent`` (the SDK's default entrypoint)."""

from parcel_app import agent

__all__ = ["agent"]

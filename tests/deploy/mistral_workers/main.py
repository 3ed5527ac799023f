"""What the test's ``agents run-worker tests/deploy/mistral_workers`` loads: ``main:agent``."""

from redelivery import agent

__all__ = ["agent"]

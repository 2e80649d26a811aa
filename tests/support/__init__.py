"""Test support shared by tests and benchmarks (images, services)."""

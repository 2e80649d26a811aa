"""ray-bench: a Ray-based distributed scheduler for LLM-agent benchmark suites."""

__version__ = "0.1.0"

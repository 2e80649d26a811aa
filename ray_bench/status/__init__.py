"""The state of a run as an operator sees it: typed, from the plan, the ledger and the lock.

``read.read_status`` is the one reader (``status``, ``watch``, ``pause``); ``liveness`` is
imported by the driver too, so this package imports nothing at import time.
"""

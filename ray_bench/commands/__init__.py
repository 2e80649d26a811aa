"""The operator's commands that span the layers below them, and nothing below imports.

The launch receipt (`receipt`, `receipt_terms`: its makespan estimate runs the simulator, so it
sits above `sim`), `execute`'s check that a plan is the one `plan` wrote (`verify`, which
renders the receipt again), `rerun` (a new plan and receipt from a run's failures) and
`regrade` (reads the run's status, then runs the runner again). The packages they use (`plan`,
`evidence`, `scheduler`, `sim`, `status`, `cells`) stay free of them, so the graph between
packages has no cycle (`tests/test_package_imports.py`).
"""

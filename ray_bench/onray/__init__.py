"""ray-bench on Ray: every Ray handle of the package, in one wing.

What is here is only glue between the pure packages and Ray: the cell runner actor
(:mod:`~ray_bench.onray.cell_runner`, process name ``ray::CellRunner``) and the pool that places
and waits on it (:mod:`~ray_bench.onray.pool`), the admission actor over the accounts' keepers
(:mod:`~ray_bench.onray.admission`, ``ray::AdmissionActor``) and the driver's client of it
(:mod:`~ray_bench.onray.gate`), the node check and resource supervisors on every node
(:mod:`~ray_bench.onray.nodes`, :mod:`~ray_bench.onray.supervisors`), attempt trees shipped
through Ray's object store (:mod:`~ray_bench.onray.artifact_ship`), the artifact store's probe
from every node (:mod:`~ray_bench.onray.store_probe`), ``accounts status`` read from a cluster
(:mod:`~ray_bench.onray.account_snapshots`), and starting Ray on a loaded host
(:mod:`~ray_bench.onray.start`, :mod:`~ray_bench.onray.agent_ports`).

The policy each of them carries out lives in the pure packages (``accounts``, ``scheduler``,
``cells``, ``artifacts``, ...), which import no Ray and nothing from here;
``tests/test_package_imports.py`` holds both rules. Only the composition roots (``api``, the CLI)
and, until it is handed its gate, the driver's default gate import this wing.

Named ``onray``, not ``ray``: a package ``ray_bench/ray`` would want a mirror ``tests/ray/``, which
on the tests' rootdir ``sys.path`` shadows the real ``ray``, and ``from ray_bench import ray`` reads
as Ray itself. This ``__init__`` imports nothing: each module pays Ray's import (1.3 s) only when a
command that needs Ray loads it.
"""

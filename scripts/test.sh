#!/usr/bin/env bash
# The test command: create .venv if missing, install the package with its dev and daytona extras
# (with uv, pip as the fallback), run pytest.
# Arguments go to pytest. "No tests collected" (pytest exit 5) counts as a failure.
#   --fast   the edit-test tier: every test that needs no service and is not marked slow (the pure
#            core, config, plan, evidence, reports, the simulator; 817 tests, 150 s here).
#            No Docker, Ray, Prometheus or Daytona fixture is started, under CI=true too.
# Without --fast: the full suite (1,211 tests), what .ci/run runs: 3,794 s in a fresh clone here,
# quiet; budget 20 min (see README "Set up" for where the time goes).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# Reinstall only when the project metadata changed since the last install.
stamp=.venv/.ray-bench-installed
# uv installs the same requirements in about a minute where pip takes five or six on two cores;
# pip remains the fallback when uv cannot be had.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    if .venv/bin/python -m pip install -q uv 2>/dev/null && [ -x .venv/bin/uv ]; then
        .venv/bin/uv pip install -q --python .venv/bin/python -e '.[dev,daytona]'
    else
        echo "scripts/test.sh: uv could not be installed; installing with pip (slower)" >&2
        .venv/bin/pip install -q -e '.[dev,daytona]'
    fi
    touch "$stamp"
fi

fast=()
if [ "${1:-}" = "--fast" ]; then
    shift
    fast=(-m "not docker and not ray and not prometheus and not daytona and not slow")
fi

status=0
.venv/bin/pytest -q "${fast[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests; treating that as a failure" >&2
    exit 1
fi
exit "$status"

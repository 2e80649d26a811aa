#!/usr/bin/env bash
# The test command: create .venv if missing, install the package with its dev, daytona and inspect
# extras (with uv, pip as the fallback), run pytest; then, without --fast, the tests marked `harbor`
# in .venv-harbor (Python 3.12 with Harbor 0.26, made by scripts/harbor-env.sh), because Harbor
# needs Python >= 3.12. Under CI=true a missing Python 3.12 fails the run; elsewhere that pass is
# skipped with a note.
# Arguments go to pytest. "No tests collected" (pytest exit 5) counts as a failure.
#   --fast   the edit-test tier: every test that needs no service and is not marked slow (the pure
#            core, config, plan, evidence, reports, the simulator; 1,062 tests, 160-190 s here).
#            No Docker, Ray, Prometheus or Daytona fixture is started, under CI=true too.
# Without --fast: the full suite (1,489 tests + 48 harbor), what .ci/run runs: 1,755 s, then 194 s
# for harbor, in a fresh clone on a quiet machine here on 3 Dec (README "Set up"); budget 20 min.
set -euo pipefail
cd "$(dirname "$0")/.."

# A .venv that is a link to another checkout's would reinstall that checkout's editable package
# from this one (the stamp below is per venv, not per checkout): refused, not followed.
if [ -L .venv ]; then
    echo "scripts/test.sh: .venv is a symbolic link ($(readlink .venv)); remove it (rm .venv) and run again to make this checkout's own" >&2
    exit 2
fi
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
        .venv/bin/uv pip install -q --python .venv/bin/python -e '.[dev,daytona,inspect]'
    else
        echo "scripts/test.sh: uv could not be installed; installing with pip (slower)" >&2
        .venv/bin/pip install -q -e '.[dev,daytona,inspect]'
    fi
    touch "$stamp"
fi

fast=()
if [ "${1:-}" = "--fast" ]; then
    shift
    fast=(-m "not docker and not ray and not prometheus and not daytona and not slow")
fi

# A private temporary root: pytest's default one (/tmp/pytest-of-$USER) keeps only the last three
# sessions' directories, so another pytest started on this machine meanwhile (a second checkout, a
# helper) would delete this run's live ones. Removed when the run passes; kept to read if not.
own_base=()
case " $* " in *" --basetemp"*) ;; *)
    tmp_root=$(mktemp -d "${TMPDIR:-/tmp}/ray-bench-tests.XXXXXX")
    own_base=(--basetemp "$tmp_root/main")
    ;;
esac

status=0
.venv/bin/pytest -q "${own_base[@]}" "${fast[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests; treating that as a failure" >&2
    exit 1
fi
done_with_tmp() {
    if [ "${#own_base[@]}" -gt 0 ] && [ "$1" -eq 0 ]; then rm -rf "$tmp_root"; fi
    exit "$1"
}
[ "${#fast[@]}" -eq 0 ] || done_with_tmp "$status"

# The harbor pass. Arguments naming test files outside it simply collect nothing there (exit 5,
# not a failure of this pass); "-m harbor" is combined with any -m the caller gave by pytest's
# last-one-wins rule, so a caller's -m is not passed on.
harbor_status=0
bash scripts/harbor-env.sh || harbor_status=$?
if [ "$harbor_status" -eq 3 ] && [ "${CI:-}" != true ]; then
    echo "scripts/test.sh: no Python 3.12 here; the tests marked harbor were not run" >&2
    done_with_tmp "$status"
fi
[ "$harbor_status" -eq 0 ] || exit 1
args=()
skip_next=0
for arg in "$@"; do
    if [ "$skip_next" -eq 1 ]; then skip_next=0; continue; fi
    case "$arg" in -m) skip_next=1; continue ;; -m*) continue ;; esac
    args+=("$arg")
done
harbor_base=()
[ "${#own_base[@]}" -eq 0 ] || harbor_base=(--basetemp "$tmp_root/harbor")
.venv-harbor/bin/python -m pytest -q "${harbor_base[@]}" -m harbor "${args[@]}" || harbor_status=$?
[ "$harbor_status" -eq 5 ] && harbor_status=0
[ "$status" -ne 0 ] || status=$harbor_status
done_with_tmp "$status"

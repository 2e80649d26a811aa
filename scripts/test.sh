#!/usr/bin/env bash
# The test command: create .venv if missing, install the package with its dev, daytona and inspect
# extras (with uv, pip as the fallback), run pytest; without --fast, in three passes (below): the
# main one on two pytest-xdist workers, the tests marked `harbor` in .venv-harbor beside it
# (Python 3.12 with Harbor 0.26, made by scripts/harbor-env.sh, because Harbor needs Python >=
# 3.12), then the tests marked `serial`, alone. Under CI=true a missing Python 3.12 fails the run;
# elsewhere the harbor pass is skipped with a note.
# Arguments go to pytest (a -m is combined with each pass's own). "No tests collected" (pytest
# exit 5) in every pass counts as a failure.
#   --fast   the edit-test tier: every test that needs no service and is not marked slow (the pure
#            core, config, plan, evidence, reports, the simulator; 1,583 tests, 118 s here on the
#            evening of 7 Dec at load 3-6, on four pytest-xdist workers: docs/performance.md).
#            No Docker, Ray, Prometheus or Daytona fixture is started, under CI=true too. RAY_BENCH_TEST_WORKERS=0 runs it in one process
#            (for a debugger, or -x on the first failure in order).
# Without --fast: the full suite (2,098 tests + 74 harbor + 1 serial), what .ci/run runs; the main
# pass 22 min on a quiet 2-core machine (7 Dec, evening), budget 20 (figures: docs/performance.md).
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

# The caller's -m and --basetemp are taken out of the arguments: each pass combines the -m with
# its own ("(EXPR) and not serial"), and gets a directory of its own under the base temp, since
# pytest empties its --basetemp at start and the harbor pass runs beside the main one.
args=()
mark=""
base=""
pending=""
for arg in "$@"; do
    if [ -n "$pending" ]; then
        if [ "$pending" = m ]; then mark=$arg; else base=$arg; fi
        pending=""
        continue
    fi
    case "$arg" in
        -m) pending=m ;;
        -m*) mark=${arg#-m} ;;
        --basetemp) pending=b ;;
        --basetemp=*) base=${arg#--basetemp=} ;;
        *) args+=("$arg") ;;
    esac
done
with_mark() { if [ -n "$mark" ]; then echo "($mark) and $1"; else echo "$1"; fi; }

# A private temporary root: pytest's default one (/tmp/pytest-of-$USER) keeps only the last three
# sessions' directories, so another pytest started on this machine meanwhile (a second checkout, a
# helper) would delete this run's live ones. Removed when the run passes; kept to read if not.
own_tmp=0
if [ -z "$base" ]; then
    base=$(mktemp -d "${TMPDIR:-/tmp}/ray-bench-tests.XXXXXX")
    own_tmp=1
fi
done_with_tmp() {
    if [ "$own_tmp" -eq 1 ] && [ "$1" -eq 0 ]; then rm -rf "$base"; fi
    exit "$1"
}

if [ "${#fast[@]}" -gt 0 ]; then
    # The caller's -m, if any, replaces the tier's (pytest's last -m wins), as it always has.
    [ -z "$mark" ] || fast=(-m "$mark")
    status=0
    # Four workers, a test file to each: the tier's tests mostly wait (a metrics target's serving
    # window, a timeout, a SIGTERM's grace), so four overlap their waits on two cores where two
    # idle them: 118 s against 157 s on two (7 Dec, 21:05-21:10, load 3-6, 1,583 tests; each
    # worker's collection costs ~19 s of CPU, which is why not more).
    .venv/bin/pytest -q --basetemp "$base/main" -n "${RAY_BENCH_TEST_WORKERS:-4}" --dist loadfile \
        "${fast[@]}" "${args[@]}" || status=$?
    if [ "$status" -eq 5 ]; then
        echo "scripts/test.sh: pytest collected no tests; treating that as a failure" >&2
        exit 1
    fi
    done_with_tmp "$status"
fi

# The full suite, in three passes:
#   main    every test not marked harbor or serial, on $RAY_BENCH_TEST_WORKERS (2) pytest-xdist
#           workers, a test file to a worker (--dist loadfile: a module's fixtures, such as a
#           multi-node cluster or the Daytona fixture server, start once), the slow files first
#           (tests/conftest.py, _slow_files_first; --no-loadscope-reorder keeps that order where
#           xdist would sort the files by test count). Each worker is its own
#           process with its own local Ray (support/ray_local.py); the session's images are built
#           under a machine lock (support/images.py). Most tests wait on Ray, Docker, CLIs and
#           sleeps rather than burn a core, so two workers on two cores nearly halve the pass.
#   harbor  the tests marked harbor in .venv-harbor (Python 3.12 with Harbor 0.26, made by
#           scripts/harbor-env.sh), beside the main pass, its output printed after it. Under
#           CI=true a missing Python 3.12 fails the run; elsewhere that pass is skipped with a note.
#   serial  the tests marked serial (they must have the machine to themselves), after both, alone.
# "No tests collected" (exit 5) in one pass is not a failure of that pass; in every pass it is.
harbor_status=0
bash scripts/harbor-env.sh || harbor_status=$?
if [ "$harbor_status" -eq 3 ] && [ "${CI:-}" != true ]; then
    echo "scripts/test.sh: no Python 3.12 here; the tests marked harbor will not be run" >&2
    harbor_status=5  # as if it collected nothing
elif [ "$harbor_status" -ne 0 ]; then
    exit 1
fi
harbor_pid=""
harbor_log="$base/harbor.log"
if [ "$harbor_status" -eq 0 ]; then
    mkdir -p "$base"
    .venv-harbor/bin/python -m pytest -q --basetemp "$base/harbor" -m "$(with_mark harbor)" "${args[@]}" \
        >"$harbor_log" 2>&1 &
    harbor_pid=$!
fi

status=0
.venv/bin/pytest -q --basetemp "$base/main" -n "${RAY_BENCH_TEST_WORKERS:-2}" --dist loadfile \
    --no-loadscope-reorder -m "$(with_mark "not serial")" "${args[@]}" || status=$?

if [ -n "$harbor_pid" ]; then
    wait "$harbor_pid" || harbor_status=$?
    echo "scripts/test.sh: the harbor pass (.venv-harbor, beside the main pass):"
    cat "$harbor_log"
fi

serial_status=0
.venv/bin/pytest -q --basetemp "$base/serial" -m "$(with_mark serial)" "${args[@]}" || serial_status=$?

collected=0
for s in "$status" "$serial_status" "$harbor_status"; do [ "$s" -eq 5 ] || collected=1; done
if [ "$collected" -eq 0 ]; then
    echo "scripts/test.sh: pytest collected no tests; treating that as a failure" >&2
    exit 1
fi
final=0
for s in "$status" "$serial_status" "$harbor_status"; do
    if [ "$s" -ne 0 ] && [ "$s" -ne 5 ] && [ "$final" -eq 0 ]; then final=$s; fi
done
done_with_tmp "$final"

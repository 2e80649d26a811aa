"""Secret hygiene: accounts whose credentials are canary values, agents that leak their key
everywhere they can (stdout, stderr, a /logs file, usage.json, error.json). After a full run
and a report, no canary value appears in the run root (ledger, receipt, artifacts, report),
the driver's output, Ray's session logs of that run, the metrics it exported, or the
exporter's file_sd target."""

from __future__ import annotations

import base64
import re
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from support.driver_process import DriverProcess, cli_env, run_cli
from support.ray_local import TEST_ROUTES
from support.suites import make_suite

from ray_bench.api import plan_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CANARIES = [TEST_ROUTES["RB_CANARY_KEY_1"], TEST_ROUTES["RB_CANARY_KEY_2"]]
# the whole value, and its random part alone (a leak that dropped the prefix), and its base64
# as the agent writes it (alone, padded; and urlsafe unpadded inside a Basic auth blob), less
# the boundary characters that other bytes share
NEEDLES = ([c.encode() for c in CANARIES] + [c.split("-", 1)[1][:20].encode() for c in CANARIES]
           + [base64.b64encode(c.encode())[:-4] for c in CANARIES]
           + [base64.urlsafe_b64encode(f"user:{c}".encode())[7:-4] for c in CANARIES])


def _leaks(root: Path) -> list[str]:
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            data = path.read_bytes()
        except OSError:
            continue  # sockets, vanished files
        found += [f"{path}: {n.decode()}" for n in NEEDLES if n in data]
    return found


def test_the_leak_scan_finds_a_leak(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.bin").write_bytes(b"\x00 prefix " + NEEDLES[3] + b" \xff")
    assert len(_leaks(tmp_path)) == 1


def test_canary_credentials_never_leave_the_sandbox(tmp_path: Path) -> None:
    once = tmp_path / "error-once"
    leak = ('echo "my key is $DEMO_API_KEY"; echo "stderr: key=$DEMO_API_KEY" >&2; '
            'echo "$DEMO_API_KEY" > "$LOGS_DIR/agent/key.txt"; '
            'printf %s "$DEMO_API_KEY" | base64 -w0 > "$LOGS_DIR/agent/key.b64"; '
            'printf "user:%s" "$DEMO_API_KEY" | base64 -w0 | tr "+/" "-_" | tr -d = > "$LOGS_DIR/agent/auth.b64"; '
            'printf \'{"input_tokens": 5, "output_tokens": 7, "cost_usd": 0.001, "key": "%s"}\' '
            '"$DEMO_API_KEY" > "$LOGS_DIR/agent/usage.json"; '
            # exactly one attempt of the run also reports an error naming the key
            f'if mkdir "{once}" 2>/dev/null; then printf \'{{"type": "tool_error", "message": '
            '"tool failed for key %s"}\' "$DEMO_API_KEY" > "$LOGS_DIR/agent/error.json"; '
            'exit 3; fi; '
            'sh "$SOLUTION_DIR/solve.sh"')
    arm = {"command": leak, "agent_dir": "agents", "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], reps=1, max_attempts=2,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp_path / "sbx")}}},
        arms=[{"name": "baseline", "role": "baseline", **arm},
              {"name": "mcp", "role": "variant", **arm}],
        accounts=[
            {"name": "canary-1", "route": {"env": {"DEMO_API_KEY": "RB_CANARY_KEY_1"}},
             "limits": {"max_concurrent": 2}},
            {"name": "canary-2", "route": {"env": {"DEMO_API_KEY": "RB_CANARY_KEY_2"}},
             "limits": {"max_concurrent": 2}},
        ])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="canary")
    root = planned.run_root

    # Ray's session directory of this run, kept apart from every other Ray on the machine
    # (short: Ray's socket paths are limited to ~107 bytes).
    ray_tmp = Path(tempfile.mkdtemp(prefix="rbsec-", dir="/tmp"))
    env = cli_env({"RAY_TMPDIR": str(ray_tmp), "RAY_BENCH_STATE_ROOT": str(tmp_path / "state")})
    driver = DriverProcess(root / "launch-plan.json", planned.identity, tmp_path / "logs", env=env)
    scrapes: list[bytes] = []

    def scrape() -> None:
        url = None
        while driver.proc is not None and driver.proc.poll() is None:
            if url is None:
                match = re.search(r"metrics: (http://\S+)", driver.stderr)
                url = match.group(1) if match else None
            if url is not None:
                try:
                    with urllib.request.urlopen(url, timeout=2) as response:
                        scrapes.append(response.read())
                except OSError:
                    pass
            time.sleep(0.3)

    try:
        driver.start()
        scraper = threading.Thread(target=scrape)
        scraper.start()
        rc = driver.wait(timeout=240)
        scraper.join()
        assert rc == 0, driver.stderr[-3000:]
        report = run_cli("report", str(root), env=env, timeout=120)
        assert report.returncode == 0, report.stderr

        assert once.is_dir()  # the error path ran
        assert scrapes, "the driver's metrics endpoint was never scraped"
        assert any(b"raybench_attempts_total" in s for s in scrapes)
        outputs = {"driver stdout": driver.stdout, "driver stderr": driver.stderr,
                   "report stdout": report.stdout, "report stderr": report.stderr}
        for name, text in outputs.items():
            for needle in NEEDLES:
                assert needle.decode() not in text, name
        for i, body in enumerate(scrapes):
            assert not [n for n in NEEDLES if n in body], f"metrics scrape {i}"
        sessions = list(ray_tmp.rglob("session_*"))
        assert sessions, f"no Ray session under {ray_tmp}"
        assert _leaks(root) == []
        assert _leaks(ray_tmp) == []
        assert _leaks(tmp_path / "state") == []
        assert _leaks(tmp_path / "sbx") == []
        # and the redaction left a trace where the key was
        assert (root / "receipt.md").is_file()
        key_files = list(root.rglob("key.txt"))
        assert key_files
        assert all(CANARIES[0] not in p.read_text() for p in key_files)
        encoded = [*root.rglob("key.b64"), *root.rglob("auth.b64")]
        assert len(encoded) == 2 * len(key_files)
        assert all("[redacted]" in p.read_text() for p in encoded)
    finally:
        driver.reap()
        shutil.rmtree(ray_tmp, ignore_errors=True)

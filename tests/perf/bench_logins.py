"""Logins that last, measured: the REAL ``claude`` CLI against the fake provider over three HOME
logins whose access tokens expire every few minutes, with one subscription usage-limit answer;
a pause, a fresh Ray instance, a resume.

    .venv/bin/python tests/perf/bench_logins.py [--reps 2] [--ttl 120] [--workdir DIR]

Checks and prints: no login lost (no auth failure, every account usable at the end), no cell
started on the limited account between the limit and its reset, the report's tokens and cost
equal to what the fake served, no token (any ever issued) in the run root or the state root,
and the rolling-window counts that a fresh Ray instance's account actors report after the pause
(reloaded from the state root) against the starts before it.

The CLI does not refresh its OAuth token against a custom ``ANTHROPIC_BASE_URL`` (seen with
2.1.197: it keeps sending the expired token), so a stand-in on PATH named ``claude`` refreshes
the login as the CLI's refresh does (the token endpoint's grant, the same fields written back
to ``.credentials.json``) when it expires within a minute, then execs the real CLI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.agent_clis import bin_dir
from support.fake_provider import FakeProvider

STANDIN = """#!{python}
import json, os, sys, time, urllib.request
path = os.path.join(os.environ["HOME"], ".claude", ".credentials.json")
doc = json.load(open(path))
oauth = doc["claudeAiOauth"]
if oauth["expiresAt"] / 1000 - time.time() < {margin}:
    body = json.dumps({{"grant_type": "refresh_token", "refresh_token": oauth["refreshToken"],
                       "client_id": "ray-bench-standin", "scope": " ".join(oauth.get("scopes", []))}}).encode()
    req = urllib.request.Request("{token_url}", data=body, headers={{"Content-Type": "application/json"}})
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    oauth.update(accessToken=answer["access_token"], refreshToken=answer["refresh_token"],
                 expiresAt=int((time.time() + answer["expires_in"]) * 1000))
    tmp = path + ".standin"
    with open(tmp, "w") as out:
        json.dump(doc, out)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
os.execv("{real}", ["claude", *sys.argv[1:]])
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--ttl", type=int, default=120, help="access token lifetime, seconds")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-logins-"))
    work.mkdir(parents=True, exist_ok=True)
    state = work / "state"
    os.environ["RAY_BENCH_STATE_ROOT"] = str(state)

    from ray_bench.api import pause_run, plan_run
    from ray_bench.cli.quickstart import example_dir
    from ray_bench.ledger.store import Ledger
    from ray_bench.reports.build import build_report

    with FakeProvider(token_ttl_sec=args.ttl) as fake:
        fake.access_tokens = {}
        names = ["acct-1", "acct-2", "acct-3"]
        for name in names:
            home = work / "logins" / name / ".claude"
            home.mkdir(parents=True)
            (home / ".credentials.json").write_text(json.dumps(fake.issue_login(name)))
        reset_at = math.ceil((time.time() + 150) / 60) * 60  # the CLI prints the reset to the minute
        fake.usage_limit_for = ("acct-2", reset_at)
        standin = work / "standin"
        standin.mkdir()
        (standin / "claude").write_text(STANDIN.format(python=sys.executable, margin=60,
                                                       token_url=f"{fake.url}/v1/oauth/token",
                                                       real=bin_dir() / "claude"))
        (standin / "claude").chmod(0o755)

        suite_dir = work / "suite"
        suite_dir.mkdir()
        suite = {"name": "logins", "tasks_dir": str(example_dir() / "tasks"), "reps": args.reps,
                 "backend": "local", "backends": {"local": {"max_sandboxes": 3}},
                 "arms": [{"name": "claude", "role": "baseline", "agent": "claude-code",
                           "model": "claude-sonnet-4-5", "agent_timeout_sec": 240,
                           "env": {"ANTHROPIC_BASE_URL": fake.url, "CLAUDE_CODE_MAX_RETRIES": "1",
                                   "PATH": f"{standin}:/usr/local/bin:/usr/bin:/bin"}}],
                 "preflight_cells": 1, "max_attempts": 3}
        accounts = {"accounts": [{"name": n, "route": {"home": str(work / "logins" / n)},
                                  "limits": {"max_concurrent": 1, "window": {"hours": 5, "max_cells": 100}}}
                                 for n in names]}
        (suite_dir / "suite.yaml").write_text(yaml.safe_dump(suite))
        (suite_dir / "accounts.yaml").write_text(yaml.safe_dump(accounts))
        plan = plan_run(suite=suite_dir / "suite.yaml", accounts=suite_dir / "accounts.yaml",
                        runs_dir=work / "runs", run_id="logins")
        run_root = plan.run_root
        total = plan.cells
        t0 = time.time()

        def finished() -> int:
            try:
                attempts = Ledger.read_attempts(run_root)
            except Exception:
                return 0
            return sum(1 for a in attempts if a.status == "finished" and a.valid)

        def pause_at_half() -> None:
            while finished() < total // 2:
                time.sleep(2)
            pause_run(run_root, reason="bench: Ray restart")

        threading.Thread(target=pause_at_half, daemon=True).start()
        # Each phase in its own process, as an operator runs them: execute starts its own local
        # Ray and shuts it down; a fresh process then starts a fresh Ray.
        execute = [str(Path(sys.executable).with_name("ray-bench")), "execute", "--plan",
                   str(run_root / "launch-plan.json"), "--confirm", plan.identity, "--no-metrics",
                   "--state-root", str(state)]
        first = subprocess.run(execute, check=False, capture_output=True, text=True)
        print(f"first execute: exit {first.returncode} after {time.time() - t0:.0f} s: "
              f"{(first.stdout + first.stderr).strip().splitlines()[-1:]}")

        before = {n: 0 for n in names}
        for attempt in Ledger.read_attempts(run_root):
            before[attempt.account] += 1
        probe = (
            "import json, sys\n"
            "from ray_bench.onray.start import init_ray\n"
            "from ray_bench.onray.admission import account_member, admission_actor\n"
            "from ray_bench.config.loader import load_accounts\n"
            "import ray\n"
            "init_ray(None, namespace='ray-bench', log_to_driver=False)\n"
            f"accounts = load_accounts(__import__('pathlib').Path({str(suite_dir / 'accounts.yaml')!r})).accounts\n"
            f"root = __import__('pathlib').Path({str(state)!r})\n"
            "actors = {a.name: account_member(admission_actor(root), a, root) for a in accounts}\n"
            "print(json.dumps({n: ray.get(a.snapshot.remote()).window_used for n, a in actors.items()}))\n"
            "ray.shutdown()\n")
        out = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, text=True)
        try:
            reloaded = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            print(out.stderr[-2000:])
            reloaded = {}
        print(f"window starts before the pause (ledger): {before}")
        print(f"window_used reported by fresh actors in a new Ray instance: {reloaded}")

        second = subprocess.run(execute, check=False, capture_output=True, text=True)
        print(f"resume: exit {second.returncode}; wall {time.time() - t0:.0f} s: "
              f"{(second.stdout + second.stderr).strip().splitlines()[-1:]}")

        attempts = Ledger.read_attempts(run_root)
        report = build_report(run_root)
        usage = report.usage
        in_report = int(usage["input_tokens"].sum()), int(usage["output_tokens"].sum())
        cost = float(usage["cost_usd"].sum())
        served = fake.served.input_tokens, fake.served.output_tokens
        expected_cost = served[0] * 3e-6 + served[1] * 15e-6
        limited = [a for a in attempts if a.account == "acct-2" and fake.usage_limit_answered_at is not None
                   and fake.usage_limit_answered_at < a.started_at < reset_at]
        auth = [a for a in attempts if a.failure_class == "auth"]
        leaks: list[str] = []
        tokens = fake.served.tokens_issued
        for root in (run_root, state):
            for path in root.rglob("*"):
                if path.is_file():
                    data = path.read_bytes()
                    leaks += [str(path) for t in tokens if t.encode() in data]
        valid = sum(1 for a in attempts if a.valid)
        print(f"cells {total}, attempts {len(attempts)}, valid rows {valid}, refreshes {fake.served.refreshes}, "
              f"tokens issued {len(tokens)}")
        print(f"usage limit answered at {fake.usage_limit_answered_at and round(fake.usage_limit_answered_at - t0)} s,"
              f" reset at {round(reset_at - t0)} s; attempts on acct-2 in between: {len(limited)}")
        print(f"auth failures: {len(auth)}; requests per login: {fake.served_by_label}")
        print(f"report tokens in/out {in_report} vs fake served {served}; report cost ${cost:.6f} vs "
              f"served tokens at sonnet prices ${expected_cost:.6f}")
        print(f"token leaks in run root and state root: {len(leaks)}")
        ok = (not limited and not auth and in_report == served and abs(cost - expected_cost) < 1e-6 and not leaks
              and all(reloaded.get(n) == before[n] for n in names) and second.returncode == 0)
        print("ALL CHECKS PASSED" if ok else "SOME CHECK FAILED")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

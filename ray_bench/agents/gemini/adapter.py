"""The gemini-cli adapter: its command (settings merged for the run, telemetry on) and its
translation of the run's record (see the package doc)."""

from __future__ import annotations

import json
import re
from typing import Any

from ray_bench.agents.base import (
    ARG_INSTRUCTION_BYTES,
    SESSIONS_DIR,
    STARTED_MARK,
    AgentAdapter,
    CliRun,
    Invocation,
    LiveReader,
    error_from,
    instruction,
    json_line,
    quote,
    silent,
    stopped_in_turn,
    working_when_cut,
    wrap,
)
from ray_bench.agents.gemini.errors import error_of
from ray_bench.agents.gemini.session import LOOP_STOP, Record, object_of
from ray_bench.agents.gemini.stream import Live
from ray_bench.agents.gemini.telemetry import (
    CLIENT_ERRORS_FILE,
    DISTILL_JS,
    KEEP_CLIENT_ERROR_JS,
    TELEMETRY_FILE,
    TELEMETRY_RAW,
)
from ray_bench.models.agent import AgentError, AgentReport, McpServer, Usage

#: Merges argv[2]'s sections (``{"mcpServers": {...}, "model": {"maxSessionTurns": N}}``) into the
#: settings file argv[1] key by key, keeping what each key held before in argv[3] for
#: :data:`_UNMERGE_JS` (node: the CLI is a Node program, so node is there); argv[4] names them.
_MERGE_JS = ('const fs=require("fs"),[p,add,keep,what]=process.argv.slice(1);let s;'
             'try{s=JSON.parse(fs.readFileSync(p,"utf8"))}catch(e){console.error("ray-bench: "+p+'
             '" is not plain JSON: "+what+" not added");process.exit(0)}'
             'const a=JSON.parse(add),b={};'
             'for(const g in a){const m=s[g]&&typeof s[g]==="object"?s[g]:{};b[g]={};'
             'for(const k in a[g]){b[g][k]=k in m?m[k]:null;m[k]=a[g][k]}s[g]=m}'
             'fs.writeFileSync(keep,JSON.stringify(b));'
             'fs.writeFileSync(p+".tmp",JSON.stringify(s,null,2));fs.renameSync(p+".tmp",p)')
#: Gives each merged key back what it held (or removes it), so a login HOME used in place (the
#: local backend) keeps no task's servers; other attempts' keys are left as they are.
_UNMERGE_JS = ('const fs=require("fs"),[p,keep]=process.argv.slice(1);let s,b;'
               'try{b=JSON.parse(fs.readFileSync(keep,"utf8"));s=JSON.parse(fs.readFileSync(p,"utf8"))}'
               'catch(e){process.exit(0)}'
               'for(const g in b){const m=s[g]||{};for(const k in b[g]){if(b[g][k]===null)delete m[k];'
               'else m[k]=b[g][k]}if(Object.keys(m).length)s[g]=m;else delete s[g]}'
               'fs.writeFileSync(p+".tmp",JSON.stringify(s,null,2));fs.renameSync(p+".tmp",p)')
_BEFORE = '"$LOGS_DIR/agent/.gemini-settings-before.json"'


class GeminiCli(AgentAdapter):
    name = "gemini-cli"
    binary = "gemini"
    npm_package = "@google/gemini-cli"
    instruction_limit = ARG_INSTRUCTION_BYTES  # `-p "$(cat ...)"`: one argument
    provider_hosts = ("generativelanguage.googleapis.com", "oauth2.googleapis.com", "cloudcode-pa.googleapis.com")
    model_pattern = re.compile(r"gemini-[a-z0-9.-]+")
    headless_env = {"GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1"}

    def command(self, inv: Invocation) -> str:
        keyed = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        # Written only where the HOME has no settings of its own (a login HOME keeps its own).
        setup = ('if [ ! -f "$HOME/.gemini/settings.json" ]; then mkdir -p "$HOME/.gemini"; '
                 f'if [ -n "$GEMINI_API_KEY" ]; then printf %s {quote(json.dumps(keyed))}; '
                 'else printf %s {}; fi >"$HOME/.gemini/settings.json"; fi\n')
        # The only record of the provider's response ids (see the module doc); prompts left out.
        setup += ("export GEMINI_TELEMETRY_ENABLED=true GEMINI_TELEMETRY_TARGET=local "
                  f"GEMINI_TELEMETRY_LOG_PROMPTS=false GEMINI_TELEMETRY_OUTFILE={TELEMETRY_RAW}\n")
        parts = ["gemini", "-p", instruction(), "--yolo", "--output-format", "stream-json"]
        patch: dict[str, dict[str, Any]] = {}
        what = []
        if inv.mcp_servers:
            patch["mcpServers"] = {s.name: _mcp_entry(s) for s in inv.mcp_servers}
            what.append("MCP servers")
        if inv.max_turns is not None:  # the executor role's bound; the CLI has no flag for it
            patch["model"] = {"maxSessionTurns": int(inv.max_turns)}
            what.append("the turn bound")
        if patch:
            settings = '"$HOME/.gemini/settings.json"'
            # ``gemini`` becomes a function that runs the CLI, then takes the keys out again
            # (an agent killed by its timeout or the watchdog leaves them in until a later run).
            setup += (f"node -e {quote(_MERGE_JS)} {settings} {quote(json.dumps(patch))} {_BEFORE} "
                      f"{quote(' and '.join(what))}\n"
                      f'gemini() {{ command gemini "$@"; _rb=$?; node -e {quote(_UNMERGE_JS)} {settings} '
                      f'{_BEFORE}; return $_rb; }}\n')
        if inv.model:
            parts += ["-m", quote(inv.model)]
        parts += [quote(a) for a in inv.args]
        return wrap(" ".join(parts), setup, live_stderr=True)  # its retries are on stderr alone

    def translate(self, run: CliRun) -> AgentReport:
        events = [e for e in (json_line(line) for line in run.stdout.splitlines()) if e is not None]
        record = Record.of(events, run.sessions, run.stderr)
        result = next((e for e in reversed(events) if e.get("type") == "result"), None)
        if result is None:
            failure = (object_of(run.stderr) or {}).get("error")  # `--output-format json` prints it there
            if isinstance(failure, dict):
                return AgentReport(usage=record.usage(), error=error_of(str(failure.get("message") or "error"), run,
                                                                       record.retry))
            return self._cut(run, record)
        usage = record.result_usage(result)
        failure = result.get("error")
        if result.get("status") == "error" or isinstance(failure, dict):
            message = str((failure or {}).get("message") or (failure or {}).get("type") or "error") \
                if isinstance(failure, dict) or failure is None else str(failure)
            if "max session turns" in message.lower() or (isinstance(failure, dict) and
                                                           failure.get("type") == "FatalTurnLimitedError"):
                return AgentReport(usage=usage)  # the role's turn bound: the verifier scores the outcome
            return AgentReport(usage=usage, error=error_of(message, run, record.retry))
        if record.loop_stopped:
            if not record.requests:  # no telemetry to count them: a broken-off call is likely, unseen
                usage = usage.model_copy(update={"call_under_way": True})
            return AgentReport(usage=usage, error=_loop(record, usage))
        return AgentReport(usage=usage)

    def _cut(self, run: CliRun, record: Record) -> AgentReport:
        """No result line (cut by its timeout or the watchdog, or crashed): what its calls spent,
        from the session file and the telemetry; the error its retries were in, if it was
        retrying when it was cut. Stopped by the harness, its usage is a lower bound
        (:func:`stopped_in_turn`): no record of Gemini CLI shows its turn over before its result."""
        retry = record.retry
        usage = stopped_in_turn(record.usage(), run)
        if working_when_cut(run, answered=bool(record.answers or record.responses), retrying=retry is not None):
            return AgentReport(usage=usage)
        error = silent(run, self.name)
        if retry is not None and error.type != "cli_missing":
            message = f"{self.name} was retrying when it ended: HTTP {retry.status} {retry.message[:300]}"
            error = error_from(retry.status, message, run, retry_after=retry.delay_sec)
        return AgentReport(usage=usage, error=error)

    session_root = '"$HOME/.gemini/tmp"'

    def session_ids(self, stdout: str) -> tuple[str, ...]:
        # Its session file is named by the id's first 8 characters (``session-<time>-<id[:8]>``).
        ids = (e.get("session_id") for e in (json_line(line) for line in stdout.splitlines())
               if e is not None and e.get("type") == "init")
        return tuple(dict.fromkeys(i[:8] for i in ids if isinstance(i, str) and len(i) >= 8))

    def collect_sessions(self, stdout: str) -> str | None:
        distill = (f"[ -f {TELEMETRY_RAW} ] && node -e {quote(DISTILL_JS)} {TELEMETRY_RAW} "
                   f'"$LOGS_DIR/agent/{SESSIONS_DIR}/{TELEMETRY_FILE}"\n')
        # its error reports of this run (newer than the start mark), kept without their prompt
        reports = (f'find "${{TMPDIR:-/tmp}}" -maxdepth 1 -type f -name "gemini-client-error-*.json" '
                   f'-newer "$LOGS_DIR/agent/{STARTED_MARK}" 2>/dev/null | while IFS= read -r f; do '
                   f'node -e {quote(KEEP_CLIENT_ERROR_JS)} "$f" "$LOGS_DIR/agent/{CLIENT_ERRORS_FILE}"; done\n')
        return distill + reports + (super().collect_sessions(stdout) or "exit 0\n")

    def live_reader(self) -> LiveReader:
        return Live()


def _loop(record: Record, usage: Usage) -> AgentError:
    """The CLI's loop detection stopped its agent: a degenerate attempt (class ``behaviour``),
    however its result line reads. At its first strike it breaks off the answer it is reading and
    tells the model so; at its second it breaks off that answer too and ends the run: those calls
    were served, yet only the telemetry's ``api_request`` shows them (``calls_unfinished``)."""
    kinds = ", ".join(dict.fromkeys(record.loop_types)) or "kind not recorded"
    broken = usage.calls_unfinished or 0
    return AgentError(type="loop", message=f"gemini-cli stopped its agent: {LOOP_STOP} ({kinds}); "
                      f"{broken} of its {record.requests or '?'} calls were broken off, in no total")


def _mcp_entry(server: McpServer) -> dict[str, Any]:
    if server.transport == "stdio":
        return {"command": server.command, "args": server.args}
    return {"httpUrl" if server.transport == "streamable-http" else "url": server.url}

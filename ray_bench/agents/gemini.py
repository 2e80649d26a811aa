"""Google Gemini CLI (``@google/gemini-cli``), run as ``gemini -p ... --output-format json``.

Its stdout is one object (read from the real CLI against the fake provider): ``{"session_id",
"response", "stats": {"models": {"<model>": {"api": {"totalRequests", "totalErrors"},
"tokens": {"input", "prompt", "candidates", "total", "cached", "thoughts", "tool"}}}}}``. A
failure prints ``{"session_id", "error": {"type", "message", "code"}}`` on stderr. With
``GOOGLE_GEMINI_BASE_URL`` set the CLI picks a "gateway" auth it then refuses in headless mode,
so the adapter names the auth in the user settings when the HOME has none.

MCP servers are merged into ``$HOME/.gemini/settings.json`` by name (``mcpServers``) for the
run of the CLI, keeping everything else a login HOME's own file says, and taken out again after
it; a file that does not parse as JSON is left alone with a warning. (A scope of their own
through ``GEMINI_CLI_SYSTEM_SETTINGS_PATH`` or ``..._SYSTEM_DEFAULTS_PATH`` is skipped by the CLI
unless the file and every directory above it are root-owned and not group/other-writable, which
``$LOGS_DIR`` and ``/tmp`` are not: tried with the npm CLI.)
"""

from __future__ import annotations

import json
import re
from typing import Any

from ray_bench.agents.base import (
    ARG_INSTRUCTION_BYTES,
    AgentAdapter,
    CliRun,
    Invocation,
    error_from,
    instruction,
    quote,
    silent,
    wrap,
)
from ray_bench.models.agent import AgentReport, McpServer, Usage

_STATUS = re.compile(r"\b(401|403|429|500|502|503|504)\b|RESOURCE_EXHAUSTED|UNAUTHENTICATED|UNAVAILABLE")
#: Merges argv[2]'s servers into the settings file argv[1], keeping what each name held before
#: in argv[3] for :data:`_UNMERGE_JS` (node: the CLI is a Node program, so node is there).
_MERGE_JS = ('const fs=require("fs"),[p,add,keep]=process.argv.slice(1);let s;'
             'try{s=JSON.parse(fs.readFileSync(p,"utf8"))}catch(e){console.error("ray-bench: "+p+'
             '" is not plain JSON: MCP servers not added");process.exit(0)}'
             'const a=JSON.parse(add),m=s.mcpServers||{},b={};'
             'for(const k in a){b[k]=k in m?m[k]:null;m[k]=a[k]}s.mcpServers=m;'
             'fs.writeFileSync(keep,JSON.stringify(b));'
             'fs.writeFileSync(p+".tmp",JSON.stringify(s,null,2));fs.renameSync(p+".tmp",p)')
#: Gives each merged name back what it held (or removes it), so a login HOME used in place (the
#: local backend) keeps no task's servers; other attempts' names are left as they are.
_UNMERGE_JS = ('const fs=require("fs"),[p,keep]=process.argv.slice(1);let s,b;'
               'try{b=JSON.parse(fs.readFileSync(keep,"utf8"));s=JSON.parse(fs.readFileSync(p,"utf8"))}'
               'catch(e){process.exit(0)}const m=s.mcpServers||{};'
               'for(const k in b){if(b[k]===null)delete m[k];else m[k]=b[k]}'
               'if(Object.keys(m).length)s.mcpServers=m;else delete s.mcpServers;'
               'fs.writeFileSync(p+".tmp",JSON.stringify(s,null,2));fs.renameSync(p+".tmp",p)')
_BEFORE = '"$LOGS_DIR/agent/.gemini-mcp-before.json"'
_GRPC = {"RESOURCE_EXHAUSTED": 429, "UNAUTHENTICATED": 401, "UNAVAILABLE": 503}


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
        parts = ["gemini", "-p", instruction(), "--yolo", "--output-format", "json"]
        if inv.mcp_servers:
            servers = {s.name: _mcp_entry(s) for s in inv.mcp_servers}
            settings = '"$HOME/.gemini/settings.json"'
            # ``gemini`` becomes a function that runs the CLI, then takes the servers out again
            # (an agent killed by its timeout or the watchdog leaves them in until a later run).
            setup += (f"node -e {quote(_MERGE_JS)} {settings} {quote(json.dumps(servers))} {_BEFORE}\n"
                      f'gemini() {{ command gemini "$@"; _rb=$?; node -e {quote(_UNMERGE_JS)} {settings} '
                      f'{_BEFORE}; return $_rb; }}\n')
        if inv.model:
            parts += ["-m", quote(inv.model)]
        parts += [quote(a) for a in inv.args]
        return wrap(" ".join(parts), setup)

    def translate(self, run: CliRun) -> AgentReport:
        result = _object(run.stdout) or {}
        failure = result.get("error") or (_object(run.stderr) or {}).get("error")
        usage = _usage(result)
        if isinstance(failure, dict):
            message = str(failure.get("message") or failure.get("type") or "error")
            m = _STATUS.search(message)
            status = (_GRPC.get(m.group(0)) or int(m.group(1))) if m else None
            return AgentReport(usage=usage, error=error_from(status, message, run))
        if usage is None:
            return AgentReport(error=silent(run, self.name))
        return AgentReport(usage=usage)


def _mcp_entry(server: McpServer) -> dict[str, Any]:
    if server.transport == "stdio":
        return {"command": server.command, "args": server.args}
    return {"httpUrl" if server.transport == "streamable-http" else "url": server.url}


def _object(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    while start != -1:
        try:
            data = json.loads(text[start:])
        except ValueError:
            start = text.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
            continue
        return data if isinstance(data, dict) else None
    return None


def _usage(result: dict[str, Any]) -> Usage | None:
    models = ((result.get("stats") or {}).get("models") or {})
    if not models:
        return None
    tokens = {m: (v or {}).get("tokens") or {} for m, v in models.items()}
    prompt = sum(int(t.get("prompt") or 0) for t in tokens.values())
    cached = sum(int(t.get("cached") or 0) for t in tokens.values())
    output = sum(int(t.get("candidates") or 0) + int(t.get("thoughts") or 0) for t in tokens.values())
    model = max(tokens, key=lambda m: int(tokens[m].get("candidates") or 0))
    return Usage(input_tokens=max(0, prompt - cached), output_tokens=output, cache_read_tokens=cached,
                 model=model, session_id=result.get("session_id"))

"""Gemini CLI's local telemetry: where it writes, and the node one-liner that keeps only its per-call
events after the run (the response ids are kept nowhere else; see the package doc)."""

from __future__ import annotations

TELEMETRY_RAW = '"$LOGS_DIR/agent/.gemini-telemetry.log"'
#: The distilled telemetry, read back with the session files.
TELEMETRY_FILE = "telemetry.jsonl"
#: Keeps the per-call events of the raw telemetry (pretty-printed records, one ``{`` / ``[`` to
#: ``}`` / ``]`` at column 0 each; a record cut by a kill does not parse and is dropped), with only
#: the fields read here: no prompt, no key. Each call is an ``api_request`` when it is sent, then an
#: ``api_response`` or an ``api_error`` when it ends (LoggingContentGenerator in 0.61.0's bundle);
#: a stream the CLI stops reading (its loop detection breaks out of it) logs neither, so a request
#: without an end is a call that may be billed and is in no total. ``loop_detected`` is a strike of
#: its loop detection (``count`` 1: it tells the model and goes on; 2: it ends the run).
DISTILL_JS = (
    'const fs=require("fs"),[src,dst]=process.argv.slice(1);let t;try{t=fs.readFileSync(src,"utf8")}'
    'catch(e){process.exit(0)}const out=[];let buf=null;'
    'const keep=["event.name","event.timestamp","model","status_code","error","input_token_count",'
    '"output_token_count","cached_content_token_count","thoughts_token_count","tool_token_count",'
    '"gen_ai.response.id","gen_ai.response.model","loop_type","count"];'
    'const calls=["gemini_cli.api_request","gemini_cli.api_response","gemini_cli.api_error","loop_detected"];'
    'const take=r=>{if(Array.isArray(r)){r.forEach(take);return}const a=r&&r.attributes;if(!a)return;'
    'const n=a["event.name"];if(!calls.includes(n)&&'
    '!(n==="gen_ai.client.inference.operation.details"&&a["gen_ai.response.id"]))return;const o={};'
    'for(const k of keep)if(k in a)o[k]=k==="error"?String(a[k]).slice(0,2000):a[k];out.push(JSON.stringify(o))};'
    'for(const l of t.split("\\n")){if(buf===null){if(l==="{"||l==="[")buf=[l];continue}buf.push(l);'
    'if(l==="}"||l==="]"){try{take(JSON.parse(buf.join("\\n")))}catch(e){}buf=null}}'
    'fs.mkdirSync(require("path").dirname(dst),{recursive:true});'
    'fs.writeFileSync(dst,out.length?out.join("\\n")+"\\n":"");fs.unlinkSync(src)')

#: Gemini CLI's own error reports (``reportError``: ``gemini-client-error-<type>-<time>.json`` in
#: ``os.tmpdir()``, i.e. ``$TMPDIR``, which the local backend points into the sandbox's scratch),
#: one JSON line each here, as evidence of what went wrong in the client.
CLIENT_ERRORS_FILE = "gemini-client-errors.jsonl"
#: Keeps of one report (argv[1]) its file name and its ``error`` (message, stack cut to 4 KB),
#: appended to argv[2]; the ``context`` (the request's contents: the prompt) is left out. The
#: report is then removed, so nothing stays in the temporary directory.
KEEP_CLIENT_ERROR_JS = (
    'const fs=require("fs"),path=require("path"),[src,dst]=process.argv.slice(1);let r={};'
    'try{r=JSON.parse(fs.readFileSync(src,"utf8"))}catch(e){}const e=r&&r.error||{};'
    'fs.appendFileSync(dst,JSON.stringify({file:path.basename(src),message:String(e.message||"").slice(0,2000),'
    'stack:String(e.stack||"").slice(0,4000)})+"\\n");fs.unlinkSync(src)')

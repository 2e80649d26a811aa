"""Google Gemini CLI (``@google/gemini-cli``), run as ``gemini -p ... --output-format stream-json``.

Read from the real CLI 0.61.0 against tests/support/fake_provider.py and from its bundled source:

- stdout is one event per line: ``init`` (``session_id``, ``model``), ``message``, ``tool_use``
  (``tool_name``, ``parameters``), ``tool_result``, ``error`` (a warning), and last ``result``
  (``status`` success|error, ``error: {type, message}``, ``stats: {input_tokens`` (prompt, cached
  included), ``input`` (uncached), ``cached``, ``output_tokens`` (candidates, thoughts not
  included), ``total_tokens``, ``models: {...}}``). No usage is printed per call.
- Its session file, ``$HOME/.gemini/tmp/<project>/chats/session-<time>-<id[:8]>.jsonl``, is
  appended (``appendFileSync``) as each answer arrives: a ``gemini`` message per answer with
  ``id``, ``model`` and ``tokens: {input`` (= promptTokenCount), ``output``, ``cached``,
  ``thoughts``, ``tool``, ``total}``; a message is appended again when its tool calls are added
  (same ``id``). It survives a kill. It holds no provider response id.
- The response id (the API's ``responseId``) is only in its telemetry: with
  ``GEMINI_TELEMETRY_TARGET=local`` and an outfile, each call's ``gemini_cli.api_request``,
  ``gemini_cli.api_response`` (token counts) or ``gemini_cli.api_error`` (``status_code``, the
  API's error body) and ``gen_ai.client.inference.operation.details`` (``gen_ai.response.id``)
  are written, in order, one batch every 5 s (the CLI builds its ``BatchLogRecordProcessor``
  with the defaults: ``OTEL_BLRP_*`` is not read). A kill, and the CLI's own fatal exits
  (``process.exit`` after its turn bound or an API error), lose the events of the last batch: the
  ids of answers in those last seconds are then not known (measured: 0 of 3 ids after a turn-bound
  exit, 2 of 2 after a kill in a long tool call). No setting flushes sooner (the processor is built
  with no config and reads no ``OTEL_BLRP_*``), so the usage says how many answered calls have no
  id (``request_ids_missing``) and ``settle`` never calls such an attempt settled. With prompt
  logging off it is ~25 KB per call; after the run a node one-liner keeps only those events
  (``sessions/telemetry.jsonl``) and removes the raw file.
- Retries: 429 and 5xx are retried (10 attempts, 5 s doubling to 30 s; a 429's ``RetryInfo``
  delay is honoured as a floor, and a daily quota or a delay over 5 minutes is not retried);
  each retry is an ``api_error`` in the telemetry and "Attempt N failed ..." on stderr, which the
  wrapper streams live (``wrap(live_stderr=True)``): three in a row end the run
  (:class:`~ray_bench.agents.gemini.stream.Live`). 401 and 403 are never
  retried: the run ends at once with its ``result`` error, so a refused login
  needs no live stop.
- Its loop detection (``LoopDetectionService``: 5 identical tool calls in a row, a chanted
  sentence, or a model's judgement after 30 turns) breaks off the answer it is reading; at its first
  strike it tells the model and goes on, at its second it prints the warning "Loop detected,
  stopping execution" and ends the run with a ``result`` of ``success``. The broken-off calls were
  served, yet appear in no total and no id: only their ``api_request`` in the telemetry. Such a run is
  a degenerate attempt (error type ``loop``, class ``behaviour``) whose usage is a lower bound
  (``calls_unfinished``). Measured with 0.61.0 against the fake: 6 calls served, 4 in its totals.
- The turn bound is ``model.maxSessionTurns`` in settings.json (no flag); reaching it ends the
  run with "Reached max session turns" (exit 53), the agent's own outcome.

With ``GOOGLE_GEMINI_BASE_URL`` set the CLI picks a "gateway" auth it then refuses in headless
mode, so the adapter names the auth in the user settings when the HOME has none.

MCP servers (and the turn bound) are merged into ``$HOME/.gemini/settings.json`` key by key
for the run of the CLI, keeping everything else a login HOME's own file says, and taken out again
after it; a file that does not parse as JSON is left alone with a warning. (A scope of their own
through ``GEMINI_CLI_SYSTEM_SETTINGS_PATH`` or ``..._SYSTEM_DEFAULTS_PATH`` is skipped by the CLI
unless the file and every directory above it are root-owned and not group/other-writable, which
``$LOGS_DIR`` and ``/tmp`` are not: tried with the npm CLI.)

The package: ``adapter`` (the command and the translation), ``stream`` (the live reader),
``session`` (chat file and telemetry into usage), ``telemetry`` (its outfile and distiller),
``errors`` (statuses, delays, the error contract).
"""

from ray_bench.agents.gemini.adapter import GeminiCli
from ray_bench.agents.gemini.telemetry import TELEMETRY_FILE

__all__ = ["TELEMETRY_FILE", "GeminiCli"]

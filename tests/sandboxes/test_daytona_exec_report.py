"""The Daytona exec wrapper's report, read strictly: a report that says less than its header
announces is an error of the provider's (the command's output is unknown), never empty output."""

from __future__ import annotations

import base64

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from ray_bench.errors import SandboxExecReportError
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.attempt import AttemptError, AttemptSummary
from ray_bench.sandboxes.daytona.sandbox import _parse_exec

CAP = 1 << 20


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode() + "\n" if data else ""


def _report(out: bytes, err: bytes, rc: int = 0, out_len: int | None = None) -> str:
    announced = len(out) if out_len is None else out_len
    return f"RB {rc} 0 {announced} {len(err)} 0\n{_b64(out)}RB-SEP\n{_b64(err)}"


def test_a_whole_report_reads_back_and_counts_what_the_cap_dropped() -> None:
    got = _parse_exec(_report(b"out\n", b"err\n", rc=3), 0, CAP, 1.0)
    assert (got.exit_code, got.stdout, got.stderr, got.truncated_bytes) == (3, "out\n", "err\n", 0)
    capped = _parse_exec(_report(b"ab", b"", out_len=10), 0, 2, 1.0)
    assert (capped.stdout, capped.truncated_bytes) == ("ab", 8)
    # A child still writing between the wrapper's count and its copy: more than announced is kept.
    assert _parse_exec(_report(b"out\nlate\n", b"", out_len=4), 0, CAP, 1.0).stdout == "out\nlate\n"
    # A cd that failed says only its header.
    assert _parse_exec("RB 126 0 0 0\n", 0, CAP, 1.0).exit_code == 126


@pytest.mark.parametrize(
    "text",
    [
        "RB-SEP\n",  # seen under load: the header and stdout lost before the answer was read
        "",
        "Y3V0Cg==\nRB-SEP\n",
        "RB 0 zero 4 0 0\nb3V0Cg==\nRB-SEP\n",
    ],
    ids=["separator alone", "nothing", "no header", "garbled header"],
)
def test_a_report_without_its_header_is_the_providers_error(text: str) -> None:
    with pytest.raises(SandboxExecReportError, match="without its header") as info:
        _parse_exec(text, 0, CAP, 1.0)
    assert info.value.failure_class == "stack"


def test_a_report_cut_short_is_an_error_not_empty_output() -> None:
    whole = _report(b"out\n", b"err\n")
    for cut in (whole[: whole.index("RB-SEP")], whole[: whole.index("RB-SEP") + 7], "RB 0 0 4 4 0\n"):
        with pytest.raises(SandboxExecReportError, match="cut short"):
            _parse_exec(cut, 0, CAP, 1.0)


def test_a_garbled_block_is_an_error_naming_the_wrappers_own_lines_never_the_output() -> None:
    secret = base64.b64encode(b"sk-ant-not-a-real-key-123456").decode()
    text = f"RB 0 0 21 28 0\nsh: base64: not found\nRB-SEP\n{secret[:-3]}!\n"
    with pytest.raises(SandboxExecReportError, match="garbled") as info:
        _parse_exec(text, 0, CAP, 1.0)
    message = str(info.value)
    assert "base64: not found" in message and "RB-SEP" in message
    assert secret[:16] not in message  # an output block is never quoted: it may hold a secret


def test_a_lost_report_is_classified_as_the_providers_and_invalid() -> None:
    with pytest.raises(SandboxExecReportError) as info:
        _parse_exec("RB-SEP\n", 0, CAP, 1.0)
    error = info.value
    summary = AttemptSummary(
        error=AttemptError(type=type(error).__name__, message=str(error), failure_class=error.failure_class)
    )
    verdict = classify(summary, Catalog.default())
    assert not verdict.valid and verdict.failure_class == "stack"

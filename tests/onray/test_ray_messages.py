"""Ray's messages to the driver (a dead worker's report can quote its environment) reach the run
root's file with the run's credential values scrubbed, the plain and the base64 forms."""

from __future__ import annotations

import base64
from pathlib import Path

from ray_bench.onray.start import _write_ray_messages, send_ray_messages_to

SECRET = "sk-ant-test-0123456789abcdef"


def test_a_credential_value_in_rays_messages_is_scrubbed(tmp_path: Path) -> None:
    out = tmp_path / "ray-driver.log"
    send_ray_messages_to(out, [SECRET, ""])
    try:
        encoded = base64.b64encode(SECRET.encode()).decode()
        _write_ray_messages({"pid": 42, "lines": [f"ANTHROPIC_API_KEY={SECRET}", f"auth {encoded}", "plain"]})
    finally:
        send_ray_messages_to(None)
    text = out.read_text()
    assert SECRET not in text and encoded not in text
    assert "ANTHROPIC_API_KEY=" in text and text.count("\n") == 3 and "plain" in text


def test_without_secrets_the_lines_are_written_as_sent(tmp_path: Path) -> None:
    out = tmp_path / "ray-driver.log"
    send_ray_messages_to(out)
    try:
        _write_ray_messages({"pid": 7, "lines": ["raylet died"]})
    finally:
        send_ray_messages_to(None)
    assert out.read_text().endswith("(7) raylet died\n")

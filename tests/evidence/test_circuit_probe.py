"""The recovery circuit's bounded reopen (pure): a hypothesis puts an open scope on probation,
one probe at a time; a valid probe reopens it, the same signature closes it again."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_bench.evidence.circuit import RecoveryCircuit, circuit_from, next_probe, open_scopes_from
from ray_bench.ledger.events import RunEvent, UnknownEvent, parse_event


def _opened(scope_class: str = "tool", fp: str = "fp-1", account: str = "a") -> RecoveryCircuit:
    circuit = RecoveryCircuit()
    for _ in range(3):
        circuit.record_failure(scope_class, fp, account=account, backend="local")
    return circuit


def test_a_hypothesis_puts_the_scope_on_probation_not_open_for_all() -> None:
    circuit = _opened()
    assert circuit.blocks(account="a", backend="local") == "run"
    assert circuit.hypothesis("installed the binary") == ["run"]
    assert circuit.blocks(account="a", backend="local") is None
    assert circuit.probing_for(account="a", backend="local") == ["run"]
    assert circuit.probe_free(["run"])
    circuit.probe_started(["run"], "c1-a2")
    assert not circuit.probe_free(["run"])  # one probe at a time: the next cell waits


def test_a_valid_probe_reopens_the_scope() -> None:
    circuit = _opened()
    circuit.hypothesis("h")
    circuit.probe_started(["run"], "c1-a2")
    assert circuit.probe_finished("c1-a2", valid=True, fingerprint=None) == {"run": "reopened"}
    assert not circuit.probing and not circuit.open_scopes


def test_the_same_signature_closes_it_again_at_once() -> None:
    circuit = _opened()
    circuit.hypothesis("h")
    circuit.probe_started(["run"], "c1-a2")
    assert circuit.probe_finished("c1-a2", valid=False, fingerprint="fp-1") == {"run": "closed"}
    assert circuit.blocks(account="a", backend="local") == "run"  # one failure, not three


def test_another_failure_frees_the_scope_for_the_next_probe() -> None:
    circuit = _opened()
    circuit.hypothesis("h")
    circuit.probe_started(["run"], "c1-a2")
    assert circuit.probe_finished("c1-a2", valid=False, fingerprint="fp-other") == {"run": "inconclusive"}
    assert circuit.probing_for(account="a", backend="local") == ["run"] and circuit.probe_free(["run"])
    # A lost or cancelled probe (not counted) says nothing either, even with the same signature.
    circuit.probe_started(["run"], "c2-a1")
    assert circuit.probe_finished("c2-a1", valid=False, fingerprint="fp-1", counted=False) == {"run": "inconclusive"}


def test_an_account_scope_reopens_on_health_recovery() -> None:
    circuit = _opened("auth", "auth-401", account="acct-a")
    assert circuit.blocks(account="acct-a", backend="") == "account:acct-a"
    assert circuit.recover("account:acct-a")
    assert circuit.blocks(account="acct-a", backend="") is None
    assert not circuit.recover("account:acct-a")  # nothing left to reopen


@dataclass
class _Ev:
    """A ledger row as the replay reads it: its typed event (ray_bench.ledger.events)."""

    seq: int
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def event(self) -> RunEvent | UnknownEvent:
        return parse_event(self.kind, self.data)


def test_the_ledger_fold_keeps_a_probing_scope_not_reopened() -> None:
    events = [_Ev(1, "circuit_open", {"scope": "run", "fingerprint": "fp-1"}),
              _Ev(2, "hypothesis", {"text": "pinned the image"})]
    circuit = circuit_from(events)
    assert circuit.probing["run"].hypothesis == "pinned the image" and circuit.probe_free(["run"])
    assert open_scopes_from(events) == {"run": "fp-1"}  # promote still refuses it
    closed = [*events, _Ev(3, "circuit_probe", {"scope": "run"}),
              _Ev(4, "circuit_open", {"scope": "run", "fingerprint": "fp-1", "probe": "c-a2"})]
    assert circuit_from(closed).open_scopes == {"run": "fp-1"} and not circuit_from(closed).probing
    reopened = [*events, _Ev(3, "circuit_reopened", {"scope": "run", "via": "probe"})]
    assert open_scopes_from(reopened) == {}


def test_next_probe_says_what_comes_next() -> None:
    circuit = _opened("auth", "auth-401", account="acct-a")
    assert "accounts enable acct-a" in next_probe("account:acct-a", None)
    assert "--hypothesis TEXT" in next_probe("run", None)
    circuit.hypothesis("new key")
    assert "'new key'" in next_probe("account:acct-a", circuit.probing["account:acct-a"])
    circuit.probe_started(["account:acct-a"], "c-a3")
    assert "c-a3 running" in next_probe("account:acct-a", circuit.probing["account:acct-a"])


def test_status_names_each_scope_and_its_next_probe() -> None:
    from ray_bench.status.read import circuit_notes

    events = [_Ev(1, "circuit_open", {"scope": "account:acct-a", "fingerprint": "auth-1"}),
              _Ev(2, "circuit_open", {"scope": "run", "fingerprint": "fp-1"})]
    notes = circuit_notes(events)  # type: ignore[arg-type]
    assert notes[0].startswith("recovery circuit open for account:acct-a (signature auth-1); next probe:")
    assert "accounts enable acct-a" in notes[0] and "--hypothesis TEXT" in notes[1]
    probing = circuit_notes([*events, _Ev(3, "hypothesis", {"text": "new key"})])  # type: ignore[arg-type]
    assert all("on probation" in n and "'new key'" in n for n in probing)
    assert circuit_notes([*events, _Ev(3, "circuit_reopened", {"scope": "run"}),
                          _Ev(4, "circuit_reopened", {"scope": "account:acct-a"})]) == []  # type: ignore[arg-type]

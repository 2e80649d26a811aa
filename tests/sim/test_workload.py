import json
from pathlib import Path

import pytest

from ray_bench.errors import ConfigError
from ray_bench.sim import build_workload, load_spec, parse_spec

BASE = {
    "seed": 3,
    "suite": {"tasks": 5, "arms": ["a", "b"], "reps": 2},
    "durations": {"lognormal": {"median_s": 360, "sigma": 1.2, "max_s": 3600}},
    "accounts": [{"name": "x", "max_concurrent": 2}],
}


def test_cells_pairs_and_seeded_durations() -> None:
    w = build_workload(parse_spec(BASE))
    assert len(w.cells) == 20
    assert {c.pair for c in w.cells} == {(f"t{t:05d}", r) for t in range(5) for r in range(2)}
    assert all(10 <= d <= 3600 for d in w.duration.values())
    assert w.history is None
    assert build_workload(parse_spec(BASE)).duration == w.duration
    other = build_workload(parse_spec({**BASE, "seed": 4}))
    assert other.duration != w.duration


def test_history_is_noisy_but_close() -> None:
    spec = parse_spec({**BASE, "suite": {"tasks": 400, "arms": ["a"]},
                       "durations": {"lognormal": {"median_s": 360, "sigma": 1.2},
                                     "cell_noise_sigma": 0.0},
                       "history": {"noise_sigma": 0.3}})
    w = build_workload(spec)
    assert w.history is not None
    ratios = sorted(w.history[c.task] / w.duration[c.cell_id] for c in w.cells)
    assert 0.9 < ratios[len(ratios) // 2] < 1.1
    assert ratios[0] < 0.8
    assert ratios[-1] > 1.25


def test_csv_durations(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("task,seconds\nt00000,1234\nother,50\n")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({**BASE, "durations": {"csv": "d.csv",
                                                           "cell_noise_sigma": 0}}))
    w = build_workload(load_spec(spec_file))
    assert w.duration["t00000/a/0"] == 1234.0  # the task's own observed duration
    assert set(w.duration.values()) <= {1234.0, 50.0}


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"accounts": []}, "accounts"),
        ({"events": [{"kind": "storm", "account": "nope", "start_h": 1, "length_min": 5}]},
         "unknown account"),
        ({"durations": {}}, "lognormal"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_specs_are_config_errors(patch: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_spec({**BASE, **patch})


def test_unreadable_spec(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_spec(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_spec(tmp_path / "list.yaml")

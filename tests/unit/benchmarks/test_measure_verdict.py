"""benchmarks/measure.py Rule 4: a benchmark whose rows include a FAILED or SHORT one, or a ratio below the
floor (Rule 3), exits 1 and names each such row; a clean run exits with main's own status."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import measure  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_rows(monkeypatch):
    monkeypatch.setattr(measure, "_SHORTFALLS", [])


def test_a_clean_run_exits_with_mains_status():
    assert measure.run(lambda: None) == 0
    assert measure.run(lambda: 3) == 3
    assert measure.Produced(acked=10, failed=0, unacknowledged=0, seconds=1.0).note() == ""


def test_a_row_with_failed_or_unacknowledged_sends_makes_the_run_exit_1_and_is_named(capsys):
    produced = measure.Produced(acked=7, failed=2, unacknowledged=1, seconds=1.0, first_error="MSG_SIZE_TOO_LARGE")

    def main():
        print(f"produce: {produced.acked} msgs{produced.note()}")

    assert measure.run(main) == 1
    out, err = capsys.readouterr()
    assert "FAILED 2, unacknowledged 1 (first error: MSG_SIZE_TOO_LARGE)" in out
    assert "FAILED OR SHORT: FAILED 2, unacknowledged 1" in err
    assert "1 row(s) FAILED or SHORT" in err


def test_a_ratio_below_the_floor_makes_the_run_exit_1_and_one_at_it_does_not(capsys):
    assert measure.below_floor(measure.FLOOR_NOISE, "the broker") == ""
    assert measure.run(lambda: None) == 0
    text = measure.below_floor(0.59, "the broker")
    assert "BELOW THE FLOOR: the broker cost 0.59x" in text
    assert measure.run(lambda: None) == 1
    assert "BELOW THE FLOOR" in capsys.readouterr().err

"""scripts/hard_bounce.py's checks of a history: what it consumed is counted in the final log, never derived from
what was acknowledged, and a final read cut short, or nothing acknowledged, fails."""


from support.fault_run import RunResult
from support.history import History
from support.scripts import load_script



def script():
    return load_script("hard_bounce")


def checks(history: History) -> dict[str, tuple[bool, str]]:
    module = script()
    return {name: (ok, detail) for name, ok, detail in module.history_checks(history, RunResult(), module.Clients())}


def acknowledged_and_seen_live(n: int) -> tuple[History, list[tuple[int, bytes]]]:
    h = History()
    records = [(offset, h.next_value()) for offset in range(n)]
    for offset, value in records:
        h.record_ack("t", 0, offset, value)
        h.record_read("live", "t", 0, offset, value)
    return h, records


def test_a_clean_history_passes_every_check():
    h, records = acknowledged_and_seen_live(5)
    h.record_final_log("t", 0, 5, records)
    results = checks(h)
    assert all(ok for ok, _ in results.values()), results
    assert "5 of them read back at their offsets by the final read, 0 missing" in results[
        "acknowledged - consumed = 0"][1]


def test_a_final_read_cut_short_fails_though_the_live_consumer_saw_everything():
    h, records = acknowledged_and_seen_live(5)
    h.record_final_log("t", 0, 5, records[:2])
    results = checks(h)
    failed = {name for name, (ok, _) in results.items() if not ok}
    assert failed == {"acknowledged - consumed = 0", "the final read reached every partition's end",
                      "nothing read live that the final log lost"}, results
    assert "2 of them read back at their offsets by the final read, 3 missing" in results[
        "acknowledged - consumed = 0"][1]


def test_nothing_acknowledged_fails():
    h = History()
    h.record_final_log("t", 0, 0, [])
    assert not checks(h)["acknowledged - consumed = 0"][0]

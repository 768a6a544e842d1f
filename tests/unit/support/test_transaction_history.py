"""The transaction history checker on made-up histories: a clean one passes, each kind of violation is found."""

from __future__ import annotations

from support.transaction_history import TransactionHistory, input_value, output_value


def clean(inputs: int = 4) -> TransactionHistory:
    """Inputs 0..inputs-1 copied by attempt t1 (committed) to partition 0; attempt t2 aborted there before it."""
    history = TransactionHistory(inputs)
    history.output_partitions = 1
    aborted = [(0, output_value("in-0", "t2", 0, 1))]
    committed = [(2 + n, output_value(input_value(n).decode(), "t1", n, inputs)) for n in range(inputs)]
    end = 2 + inputs + 1
    history.record_final(0, (end, committed), (end, aborted + committed))
    history.record_journal(["abort t2", "commit t1"])
    history.group_offsets = {0: (inputs, inputs)}
    return history


def kinds(history: TransactionHistory) -> set[str]:
    return {p.kind for p in history.check().problems}


def test_a_clean_history_is_ok():
    report = clean().check()
    assert report.ok, report
    assert (report.committed_attempts, report.aborted_attempts) == (1, 1)


def test_nothing_committed_proves_nothing():
    history = TransactionHistory(0)
    history.record_final(0, (0, []), (0, []))
    assert not history.check().ok


def test_a_missing_and_a_duplicated_input_are_found():
    history = clean()
    end, log = history.read_committed[0]
    log[1] = (log[1][0], output_value("in-0", "t1", 1, 4))
    history.read_uncommitted[0] = (end, [history.read_uncommitted[0][1][0], *log])
    assert {"missing", "duplicate"} <= kinds(history)


def test_an_aborted_attempt_read_committed_is_found():
    history = clean()
    history.record_journal(["abort t1"])
    assert "aborted-read" in kinds(history)


def test_a_half_visible_attempt_is_partial():
    history = clean()
    end, log = history.read_committed[0]
    history.read_committed[0] = (end, log[:2])
    assert "partial" in kinds(history)


def test_a_committed_attempt_not_read_is_lost():
    history = clean()
    history.record_journal(["commit t3"])
    assert kinds(history) == {"lost-commit"}


def test_a_read_committed_record_the_log_does_not_hold_is_a_phantom():
    history = clean()
    end, log = history.read_uncommitted[0]
    history.read_uncommitted[0] = (end, log[:-1])
    assert kinds(history) == {"phantom"}


def test_group_offsets_that_could_not_be_read_are_found():
    history = clean()
    history.group_offsets = {0: (None, 4)}
    assert kinds(history) == {"offsets"}


def test_offsets_short_of_the_input_and_a_hanging_transaction_are_found():
    history = clean()
    history.group_offsets = {0: (2, 4)}
    end, log = history.read_committed[0]
    history.record_final(1, (3, []), (5, []))
    assert kinds(history) == {"offsets", "unstable"}


def test_an_output_partition_never_read_is_unread():
    history = clean()
    history.output_partitions = 2
    assert kinds(history) == {"unread"}

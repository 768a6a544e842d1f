"""The read_committed consumer's rule (records/aborted.py) against a model: for any interleaving of plain,
committed, aborted and open transactions, the batches it keeps are exactly the committed and plain data."""

from hypothesis import given, strategies as st

from sparklog.records.aborted import AbortedTransactions
from sparklog.records.batch import build_batch, iter_batches
from sparklog.records.control import build_marker_batch

PIDS = (1, 2, 3)


def build_log(operations):
    """(the batches' bytes, the broker's aborted list, the values a read_committed reader must get)."""
    parts, aborted, expected, open_txn, offset = [], [], [], {}, 0
    pending: dict[int, list] = {}
    for op, pid in operations:
        if op in ("txn", "plain"):
            value = f"{op}{offset}".encode()
            parts.append(build_batch([(None, value, None, 1)], base_offset=offset, producer_id=pid,
                                     producer_epoch=0, base_sequence=offset, is_transactional=op == "txn"))
            if op == "plain":
                expected.append((offset, value))
            else:
                open_txn.setdefault(pid, offset)
                pending.setdefault(pid, []).append((offset, value))
        else:
            parts.append(build_marker_batch(pid, 0, op == "commit", 1, base_offset=offset))
            first = open_txn.pop(pid, None)
            if first is not None and op == "abort":
                aborted.append((pid, first))
            if op == "commit":
                expected.extend(pending.get(pid, []))
            pending.pop(pid, None)
        offset += 1
    return b"".join(parts), aborted, [v for _, v in sorted(expected)], {p: [v for _, v in vs] for p, vs in
                                                                       pending.items()}


@given(st.lists(st.tuples(st.sampled_from(["txn", "txn", "plain", "commit", "abort"]), st.sampled_from(PIDS)),
                max_size=40))
def test_only_committed_and_plain_data_is_kept(operations):
    data, aborted, expected, still_open = build_log(operations)
    rule = AbortedTransactions(aborted)
    kept = [batch.raw for batch in iter_batches(data) if not rule.skips(batch)]
    values = [record.value for raw in kept for batch in iter_batches(bytes(raw)) for record in batch.records()]
    committed_or_plain = [v for v in values if v not in {x for vs in still_open.values() for x in vs}]
    assert committed_or_plain == expected  # open transactions lie past the LSO: the broker never serves them


def test_markers_are_skipped_and_plain_batches_kept_without_an_aborted_list():
    data = build_batch([(None, b"a", None, 1)]) + build_marker_batch(1, 0, True, 1, base_offset=1)
    rule = AbortedTransactions([])
    assert [rule.skips(batch) for batch in iter_batches(data)] == [False, True]

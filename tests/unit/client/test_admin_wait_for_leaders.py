"""AdminClient.wait_for_leaders waits for the partitions a creation or growth asked for, not just any."""

from sparklog.client.admin import AdminClient
from sparklog.client.backoff import ExponentialBackoff


def test_a_growth_waits_until_the_metadata_lists_the_new_partitions(monkeypatch):
    admin = AdminClient.__new__(AdminClient)  # no connection: describe and _served are the metadata seen
    admin.timeout = 5.0
    admin._backoff = ExponentialBackoff(1, 2)
    seen = iter([{"t": {0: 1}}, {"t": {0: 1}}, {"t": {0: 1, 1: 2}}])
    asked = []

    def describe(names):
        asked.append(names)
        return next(seen)

    monkeypatch.setattr(admin, "describe", describe)
    monkeypatch.setattr(admin, "_served", lambda name, leaders: True)
    assert admin.wait_for_leaders("t", partitions=2) == {0: 1, 1: 2}
    assert len(asked) == 3

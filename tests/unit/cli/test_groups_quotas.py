"""`sparklog groups describe --members`' QUOTA column (cli/groups.py Rule 6): each member's client-id quotas,
clients/<client-id> before clients/<default>, key by key."""

from __future__ import annotations

from sparklog.cli.groups import GroupView, member_quotas, print_members
from sparklog.client.kafka_groups import GroupMember


class Admin:
    def __init__(self, entries) -> None:
        self.entries = entries
        self.asked = []

    def describe_client_quotas(self, components, strict=False):
        self.asked.append((components, strict))
        return self.entries


MEMBERS = [GroupMember("m-1", None, "noisy", "/10.0.0.1", (("t", 0),)),
           GroupMember("m-2", None, "quiet", "/10.0.0.2", (("t", 1),)),
           GroupMember("m-3", None, "other", "/10.0.0.3", ())]


def test_each_member_gets_its_client_id_quota_before_the_default_key_by_key():
    admin = Admin([([("client-id", "noisy")], {"consumer_byte_rate": 2097152.0}),
                   ([("client-id", None)], {"consumer_byte_rate": 1e9, "request_percentage": 12.5})])
    quotas = member_quotas(admin, MEMBERS)
    assert quotas == {"noisy": "consumer_byte_rate=2097152,request_percentage=12.5",
                      "quiet": "consumer_byte_rate=1000000000,request_percentage=12.5",
                      "other": "consumer_byte_rate=1000000000,request_percentage=12.5"}
    assert admin.asked == [([("client-id", 2, None)], True)]  # client-id entities only (strict)
    assert member_quotas(Admin([]), MEMBERS) == {"noisy": "", "quiet": "", "other": ""}


def test_the_members_view_shows_the_quota_column_and_a_dash_without_one(capsys):
    group = GroupView("g", "kafka", "Stable", members=MEMBERS[:2])
    print_members(group, {"noisy": "consumer_byte_rate=2097152", "quiet": ""})
    header, noisy, quiet = capsys.readouterr().out.splitlines()
    assert header.split()[-1] == "QUOTA"
    assert noisy.split()[-1] == "consumer_byte_rate=2097152" and quiet.split()[-1] == "-"

"""KafkaGroupAdmin's Rule 2 against a scripted broker: a coordinator that moved or is loading is found again
and asked again until the request timeout; any other error is raised at once."""

from __future__ import annotations

import pytest

from sparklog.client.kafka_groups import KafkaGroupAdmin
from sparklog.protocol import ApiKey, FindCoordinatorResponse
from sparklog.protocol.errors import CoordinatorLoadInProgressError, GroupAuthorizationFailedError, NotCoordinatorError
from sparklog.protocol.group_admin import DescribedGroup, DescribeGroupsResponse
from support.client_fake_broker import FakeBroker


def script(broker: FakeBroker, describe_errors: list[int], find_errors: list[int] = ()) -> dict:
    """FindCoordinator and DescribeGroups answer the scripted error codes first, then succeed."""
    calls = {"find": 0, "describe": 0}
    find_errors, describe_errors = list(find_errors), list(describe_errors)

    def find(request):
        calls["find"] += 1
        code = find_errors.pop(0) if find_errors else 0
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=None, node_id=0,
                                       host="127.0.0.1", port=broker.port)

    def describe(request):
        calls["describe"] += 1
        code = describe_errors.pop(0) if describe_errors else 0
        return DescribeGroupsResponse(throttle_time_ms=0, groups=[DescribedGroup(
            error_code=code, group_id="g", group_state="Empty", protocol_type="consumer", protocol_data="",
            members=[])])

    broker.handlers[ApiKey.FIND_COORDINATOR] = find
    broker.handlers[ApiKey.DESCRIBE_GROUPS] = describe
    return calls


def admin(broker: FakeBroker, timeout_ms: int = 5000) -> KafkaGroupAdmin:
    return KafkaGroupAdmin(broker.bootstrap, **{"request.timeout.ms": timeout_ms, "retry.backoff.ms": 10})


def test_a_coordinator_that_moved_or_is_loading_is_found_and_asked_again():
    with FakeBroker({"t": 1}) as broker:
        calls = script(broker, describe_errors=[16, 14], find_errors=[15])  # NOT_COORDINATOR, LOAD, NOT_AVAILABLE
        client = admin(broker)
        try:
            group = client.describe_group("g")
        finally:
            client.close()
        assert group is not None and group.state == "Empty"
        assert calls == {"find": 4, "describe": 3}  # one FindCoordinator per attempt, the first one refused


def test_a_coordinator_that_never_settles_raises_its_error_after_the_timeout():
    with FakeBroker({"t": 1}) as broker:
        script(broker, describe_errors=[14] * 10_000)
        client = admin(broker, timeout_ms=500)
        try:
            with pytest.raises((CoordinatorLoadInProgressError, NotCoordinatorError)):
                client.describe_group("g")
        finally:
            client.close()


def test_any_other_error_is_raised_at_once():
    with FakeBroker({"t": 1}) as broker:
        calls = script(broker, describe_errors=[30])  # GROUP_AUTHORIZATION_FAILED
        client = admin(broker)
        try:
            with pytest.raises(GroupAuthorizationFailedError):
                client.describe_group("g")
        finally:
            client.close()
        assert calls["describe"] == 1

"""The transaction handlers' version rule (handlers.py Rule 1): PRODUCER_FENCED only to versions that know it."""

from __future__ import annotations

import pytest

from sparklog.broker.coordinator.transaction.handlers import _versioned
from sparklog.protocol import ApiKey, RequestHeader
from sparklog.protocol.registry import REQUESTS, Request

FENCED, OLD_FENCED = 90, 47


@pytest.mark.parametrize("key, first", [(ApiKey.INIT_PRODUCER_ID, 4), (ApiKey.ADD_PARTITIONS_TO_TXN, 2),
                                        (ApiKey.ADD_OFFSETS_TO_TXN, 2), (ApiKey.END_TXN, 2)])
def test_producer_fenced_is_invalid_producer_epoch_before_the_version_that_knows_it(key, first):
    for version in range(REQUESTS[key].min_version, REQUESTS[key].max_version + 1):
        request = Request(RequestHeader(key, version, 1, "c"), REQUESTS[key]())
        assert _versioned(FENCED, request) == (FENCED if version >= first else OLD_FENCED)
        assert _versioned(51, request) == 51  # other codes pass as they are

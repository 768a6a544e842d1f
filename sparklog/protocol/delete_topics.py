"""DeleteTopics (key 20), versions 0-3, none flexible. Transcribed from Kafka's DeleteTopicsRequest.json
and DeleteTopicsResponse.json (v0 differs from v1 only by the response's throttle_time_ms).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DeleteTopicsRequest", "DeleteTopicsResponse", "DeletableTopicResult"]

DeleteTopicsRequest = message("DeleteTopicsRequest", api_key=ApiKey.DELETE_TOPICS, versions="0-3",
                              module=__name__, fields=[
    F("topic_names", "[]string", "0-5"),
    F("timeout_ms", "int32", "0+"),
])

DeleteTopicsResponse = message("DeleteTopicsResponse", api_key=ApiKey.DELETE_TOPICS, versions="0-3",
                               module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("responses", "[]DeletableTopicResult", "0+", fields=[
        F("name", "string", "0+", nullable="6+"),
        F("error_code", "int16", "0+"),
    ]),
])

DeletableTopicResult = DeleteTopicsResponse.DeletableTopicResult

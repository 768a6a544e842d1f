"""DeleteTopics (key 20), versions 0-6 served, flexible from v4. Transcribed from Kafka's DeleteTopicsRequest.json
and DeleteTopicsResponse.json (v0 differs from v1 only by the response's throttle_time_ms).

By version: v4 flexible; v5 error_message; v6 (KIP-516) ``topics`` replaces ``topic_names``: each names a topic by
name or by id, and each result carries the topic's id (the authorizer resolves ids to names, authorization.py).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DeleteTopicsRequest", "DeleteTopicsResponse", "DeletableTopicResult", "DeleteTopicState"]

DeleteTopicsRequest = message("DeleteTopicsRequest", api_key=ApiKey.DELETE_TOPICS, versions="0-6",
                              flexible="4+", module=__name__, fields=[
    F("topics", "[]DeleteTopicState", "6+", fields=[
        F("name", "string", "6+", nullable="6+", default=None),
        F("topic_id", "uuid", "6+"),
    ]),
    F("topic_names", "[]string", "0-5"),
    F("timeout_ms", "int32", "0+"),
])

DeleteTopicsResponse = message("DeleteTopicsResponse", api_key=ApiKey.DELETE_TOPICS, versions="0-6",
                               flexible="4+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("responses", "[]DeletableTopicResult", "0+", fields=[
        F("name", "string", "0+", nullable="6+"),
        F("topic_id", "uuid", "6+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "5+", nullable="5+", default=None),
    ]),
])

DeletableTopicResult = DeleteTopicsResponse.DeletableTopicResult
DeleteTopicState = DeleteTopicsRequest.DeleteTopicState

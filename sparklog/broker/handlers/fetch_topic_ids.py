"""Fetch v13+ (KIP-516): topics asked by id, resolved to the names the Fetch core reads.

Rule: ids-resolved-per-fetch: the ids a fetch reads (the request's, or its incremental session's, which fetch_sessions.py
keys by id from v13 on) are resolved against the current metadata snapshot on every fetch, never remembered as
names: a topic deleted and re-created under the same name has a new id, so a fetcher still on the old id is
answered UNKNOWN_TOPIC_ID (and refreshes its metadata), never the new topic's records.
Rule: named-before-authorization: behind an authorizer (ACLs name topics), a v13+ request's topics are named by
their ids before the checks (`named_first`; an unknown id keeps the empty name, which no ACL grants) and a v15+
request's replica id is taken from its replica_state (a follower's CLUSTER_ACTION); the topics the authorizer
answers itself get their ids back in the answer.
Rule: unknown-ids-answered: every partition of an id no topic has here (the all-zero id included) is answered
UNKNOWN_TOPIC_ID, with no records, under its id; it stays in the fetch session (an error is answered on every
incremental fetch, fetch_sessions.py Rule 3) until the client forgets it.
"""

from __future__ import annotations

import functools

from sparklog.broker.authorization import then
from sparklog.broker.handlers.error_codes import NO_OFFSET, UNKNOWN_TOPIC_ID
from sparklog.broker.handlers.fetch_sessions import SessionFetch
from sparklog.protocol.fetch import FIRST_TOPIC_ID_VERSION, FetchableTopicResponse, FetchResponse, PartitionData

__all__ = ["named", "named_first", "adopt_replica_state", "replica_id_of"]


def named(context, partitions) -> None:
    """Name `context`'s fetch (fetch_sessions.FetchContext), and every one its session builds after it
    (fetch_sessions.py Rule 5), by the topics' ids against the snapshot current then (Rule:
    ids-resolved-per-fetch); the unknown ones are answered (Rule: unknown-ids-answered)."""
    context.name_with(functools.partial(_named, partitions))


def _named(partitions, body) -> tuple:
    """(`body` with each topic named by its id and those of unknown ids left out, their answers)."""
    names = partitions.snapshot.names_by_topic_id
    known, unknown = [], []
    for topic in body.topics:
        name = names.get(topic.topic_id)
        if name is None:
            unknown.append(FetchableTopicResponse(topic="", topic_id=topic.topic_id, partitions=[
                _unknown_id(part.partition) for part in topic.partitions]))
        else:
            topic.topic = name
            known.append(topic)
    if not unknown:
        return body, []
    return SessionFetch(body.replica_id, body.max_wait_ms, body.min_bytes, body.max_bytes, body.isolation_level,
                        known, body.rack_id), unknown


def _unknown_id(index: int) -> PartitionData:
    return PartitionData(partition_index=index, error_code=UNKNOWN_TOPIC_ID, high_watermark=NO_OFFSET,
                         last_stable_offset=NO_OFFSET, log_start_offset=NO_OFFSET, aborted_transactions=None,
                         preferred_read_replica=-1, records=b"")


def replica_id_of(body) -> int:
    """Fetch v15+ (KIP-903): the fetcher's replica id is its replica_state's (replica_id is then not sent)."""
    return body.replica_id if body.replica_state is None else body.replica_state.replica_id


def adopt_replica_state(body) -> None:
    """`replica_id_of` written into the body, for the core (which reads replica_id)."""
    body.replica_id = replica_id_of(body)


def named_first(guarded_fetch):
    """The Fetch handler behind the authorizer, `guarded_fetch`, with Rule: named-before-authorization."""
    def handle(request, state):
        body = request.body
        adopt_replica_state(body)
        if request.api_version < FIRST_TOPIC_ID_VERSION:
            return guarded_fetch(request, state)
        names = state.partitions.snapshot.names_by_topic_id
        ids = {}
        for topic in body.topics:
            topic.topic = names.get(topic.topic_id, "")
            ids[topic.topic] = topic.topic_id
        return then(guarded_fetch(request, state), lambda response: _with_ids(response, ids))
    return handle


def _with_ids(response: FetchResponse, ids: dict) -> FetchResponse:
    for topic in response.responses:
        if topic.topic_id.int == 0:
            topic.topic_id = ids.get(topic.topic, topic.topic_id)
    return response

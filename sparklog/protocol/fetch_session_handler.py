"""A fetcher's side of an incremental fetch session (KIP-227; Kafka's FetchSessionHandler): what each Fetch
request of one connection to one broker carries, given the partitions the fetcher wants now. Sans-IO.

Rule 1: with no session (at the start, after an error, or when the broker made none) the request is full: every
wanted partition, session_epoch 0 (INITIAL: asks the broker for a session), session_id the one to close if any.
Rule 2: in a session the request is incremental: session_id and the epoch the broker expects, only the partitions
whose fetch (offset, leader epoch, log start, max bytes) differs from what the session holds, and as
forgotten_topics_data the partitions the session holds that are no longer wanted. The broker answers only the
partitions of the session with something new (records, an error, a moved high watermark or log start).
Rule 3: after each answer: a top-level error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, ...) ends the
session and the next request starts over (Rule 1: the session id named for closing unless the broker had lost it);
an answer to a full request starts the session it names (none if session_id is 0); an answer to an incremental one
moves the epoch on, or ends the session if its session_id is 0. What the request carried becomes what the session
holds only on an answer. `lost()` (the connection failed mid-request: whether the broker saw it is unknown) ends
the session as an error does.
Rule 4: with sessions off (`enabled=False`) every request is full and sessionless (session_epoch -1).
Rule 5: outside a session, a request of at most one partition is sessionless too (epoch -1, closing the session
named if any): one partition gains nothing from a session, and the broker's one-partition fast path serves only
fetches outside sessions (protocol/fetch.py Rule 1). A later request of more partitions asks for a session.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from sparklog.protocol.fetch import FetchTopic, ForgottenTopic

__all__ = ["FetchSessionHandler", "INITIAL_EPOCH", "FINAL_EPOCH"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF
_NOT_FOUND = 70  # FETCH_SESSION_ID_NOT_FOUND (errors.for_code(70))


def _held(part: Any) -> tuple[int, int, int, int]:  # a FetchPartition
    return part.fetch_offset, part.current_leader_epoch, part.log_start_offset, part.partition_max_bytes


class FetchSessionHandler:
    """One fetcher's session with one broker (module docstring)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.session_id = 0
        self.epoch = INITIAL_EPOCH if enabled else FINAL_EPOCH
        self._held: dict[tuple[str, int], tuple[int, int, int, int]] = {}  # what the broker's session holds
        self._pending: dict[tuple[str, int], tuple[int, int, int, int]] | None = None  # what the request in flight makes it hold
        self.full_requests = 0
        self.incremental_requests = 0
        self.restarts = 0
        self.session_errors: list[int] = []  # the top-level error codes answered, in order

    @property
    def incremental(self) -> bool:
        return self.enabled and self.session_id != 0 and self.epoch > 0

    def build(self, wanted: Mapping[tuple[str, int], Any]) -> tuple[int, int, list[Any], list[Any]]:
        """(session_id, session_epoch, topics, forgotten_topics_data) of the next request (Rules 1, 2, 4)."""
        pending = {key: _held(part) for key, part in wanted.items()}
        self._pending = pending
        if not self.incremental:
            self.full_requests += 1
            epoch = FINAL_EPOCH if len(wanted) <= 1 else self.epoch  # Rule 5
            return self.session_id, epoch, _topics(wanted.items()), []
        self.incremental_requests += 1
        held = self._held
        changed = [(key, part) for key, part in wanted.items() if held.get(key) != pending[key]]
        gone: dict[str, list[int]] = {}
        for topic, index in held.keys() - wanted.keys():
            gone.setdefault(topic, []).append(index)
        forgotten = [ForgottenTopic(topic=topic, partitions=sorted(ps)) for topic, ps in gone.items()]
        return self.session_id, self.epoch, _topics(changed), forgotten

    def handle(self, response: Any) -> bool:
        """Rule 3 for the answer to the last request built: False when it is a session error (its partitions
        are none; the next request starts over)."""
        if response.error_code != 0:
            self.session_errors.append(response.error_code)
            self._restart(keep_id=response.error_code != _NOT_FOUND)
            return False
        if not self.enabled:
            return True
        if self.incremental:
            if response.session_id == 0:
                self._restart(keep_id=False)
                return True
            self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        else:
            self.session_id = response.session_id
            self.epoch = 1 if self.session_id else INITIAL_EPOCH
        self._held, self._pending = self._pending or {}, None
        return True

    def lost(self) -> None:
        """The request in flight got no answer (Rule 3)."""
        self._restart(keep_id=True)

    def _restart(self, keep_id: bool) -> None:
        self.restarts += self.session_id != 0
        self.session_id = self.session_id if keep_id else 0
        self.epoch = INITIAL_EPOCH if self.enabled else FINAL_EPOCH
        self._held, self._pending = {}, None


def _topics(parts: Iterable[tuple[tuple[str, int], Any]]) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, _), part in parts:
        by_topic.setdefault(topic, []).append(part)
    return [FetchTopic(topic=topic, partitions=ps) for topic, ps in by_topic.items()]

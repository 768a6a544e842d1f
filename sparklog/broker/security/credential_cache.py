"""The SCRAM credentials a broker authenticates against: every user's, read from ZooKeeper at start and kept
current through Kafka's change notifications (coordination/scram_credentials.py), so a credential added,
changed or deleted while the broker runs is in force without a restart.

Rule 1: at start every `/config/users/<user>` is read; then each notification under `/config/changes` newer than
the last one seen that names a user reloads that user (a kazoo ChildrenWatch: its callback runs on kazoo's
thread and replaces whole entries, so a reader on the event loop sees a user's old or new credentials, never a
mix).
Rule 2: a notification that cannot be read (deleted meanwhile, not JSON) is skipped with one log line; the user
it named is reloaded anyway when the name can be had, since reloading is idempotent.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, retrying
from sparklog.coordination.scram_credentials import (CHANGE_PREFIX, ScramCredential, list_users, read_credentials,
                                                     user_of_entity_path)

__all__ = ["CredentialCache"]

log = logging.getLogger(__name__)


class CredentialCache:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._last_change = -1
        self._started = False  # the watch's first call only marks where the notifications stand
        self.reloads = 0
        retrying(zk, zk.ensure_path, paths.CONFIG_CHANGES)
        ChildrenWatch(zk, paths.CONFIG_CHANGES, self._changed)
        for user in list_users(zk):
            self._reload(user)

    def lookup(self, user: str, mechanism: str) -> tuple[bytes, bytes, bytes, int] | None:
        """(salt, stored_key, server_key, iterations) of `user` for `mechanism`, as scramp's auth_fn wants."""
        cred = self._users.get(user, {}).get(mechanism)
        return None if cred is None else (cred.salt, cred.stored_key, cred.server_key, cred.iterations)

    def _changed(self, children: list[str]) -> None:
        fresh = sorted((int(name[len(CHANGE_PREFIX):]), name) for name in children
                       if name.startswith(CHANGE_PREFIX) and name[len(CHANGE_PREFIX):].isdigit())
        if not self._started:
            self._started = True
            self._last_change = fresh[-1][0] if fresh else -1
            return
        for seq, name in fresh:
            if seq > self._last_change:
                self._apply(name)
                self._last_change = seq

    def _apply(self, name: str) -> None:
        try:
            data, _ = retrying(self._zk, self._zk.get, f"{paths.CONFIG_CHANGES}/{name}")
            user = user_of_entity_path(decode(data).get("entity_path", ""))
        except (NoNodeError, ValueError, AttributeError) as exc:
            log.warning("config change %s not readable (%s); skipped", name, exc)
            return
        if user is not None:
            self._reload(user)

    def _reload(self, user: str) -> None:
        self._users[user] = read_credentials(self._zk, user)
        self.reloads += 1

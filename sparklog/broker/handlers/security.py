"""Handlers of the security APIs (handlers Rule 1: `(request, state) -> response`, no socket access).

SaslHandshake and SaslAuthenticate reach here only on a listener without SASL (a SASL listener's connections
hand them to their authenticator, dispatch.py Rule 7): ILLEGAL_SASL_STATE, as Kafka answers them there.
DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) read and write the credentials in ZooKeeper
(coordination/scram_credentials.py), Kafka's per-user and per-request error rules:

Rule 1 (Describe): `users` None describes every user with a credential; a named user without one is
RESOURCE_NOT_FOUND; a name given twice is DUPLICATE_RESOURCE.
Rule 2 (Alter): a user named in two operations of the same mechanism is DUPLICATE_RESOURCE (nothing done for
that user); an unknown mechanism is UNSUPPORTED_SASL_MECHANISM; iterations outside Kafka's bounds, an empty
salt or salted password UNACCEPTABLE_CREDENTIAL; deleting a credential that is not there RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

from collections import Counter

from kazoo.exceptions import KazooException
from kazoo.retry import RetryFailedError

from sparklog.coordination.scram_credentials import (MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, delete_credential,
                                                     list_users, read_credentials, store_salted)
from sparklog.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.scram_credentials import (SCRAM_MECHANISMS, AlterUserScramCredentialsResponse,
                                                 DescribeUserScramCredentialsResponse)

__all__ = ["SECURITY_HANDLERS"]

UNKNOWN_SERVER_ERROR = -1
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
_CODE_OF_MECHANISM = {name: code for code, name in SCRAM_MECHANISMS.items()}
_Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = _Result.CredentialInfo
_AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def handle_sasl_handshake(request, state) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])


def handle_sasl_authenticate(request, state) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ILLEGAL_SASL_STATE, auth_bytes=b"",
                                    error_message="SaslAuthenticate on a listener without SASL")


def handle_describe_user_scram_credentials(request, state):
    return _over_zookeeper(_describe, request.body, state, lambda message: DescribeUserScramCredentialsResponse(
        throttle_time_ms=0, error_code=UNKNOWN_SERVER_ERROR, error_message=message, results=[]))


async def _over_zookeeper(fn, body, state, failed):
    """`fn(body, zk)` on the executor; a ZooKeeper that cannot be reached is an error reply, not a closed
    connection."""
    if state.zk is None:
        return failed("no ZooKeeper")
    try:
        return await state.blocking(fn, body, state.zk)
    except (KazooException, RetryFailedError) as exc:
        return failed(f"ZooKeeper: {exc!r}")


def _describe(body, zk) -> DescribeUserScramCredentialsResponse:
    named = None if body.users is None else [user.name for user in body.users]
    counts = Counter(named or ())
    results = []
    for user in (list_users(zk) if named is None else dict.fromkeys(named)):
        creds = read_credentials(zk, user)
        if counts[user] > 1:
            results.append(_Result(user=user, error_code=DUPLICATE_RESOURCE,
                                   error_message=f"user {user!r} named more than once"))
        elif creds:
            results.append(_Result(user=user, error_code=0, credential_infos=[
                _Info(mechanism=_CODE_OF_MECHANISM[m], iterations=c.iterations) for m, c in sorted(creds.items())]))
        elif named is not None:
            results.append(_Result(user=user, error_code=RESOURCE_NOT_FOUND,
                                   error_message=f"attempt to describe a user credential that does not exist: "
                                                 f"{user}"))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, results=results)


def handle_alter_user_scram_credentials(request, state):
    return _over_zookeeper(_alter, request.body, state, lambda message: AlterUserScramCredentialsResponse(
        throttle_time_ms=0, results=[_AlterResult(user=user, error_code=UNKNOWN_SERVER_ERROR, error_message=message)
                                     for user in dict.fromkeys(op.name for op in (*request.body.deletions,
                                                                                  *request.body.upsertions))]))


def _alter(body, zk) -> AlterUserScramCredentialsResponse:
    operations = [(op.name, op.mechanism) for op in (*body.deletions, *body.upsertions)]
    duplicated = {name for name, count in Counter(operations).items() if count > 1}
    errors: dict[str, tuple[int, str | None]] = {}
    for op in body.deletions:
        errors.setdefault(op.name, _delete(zk, op, duplicated))
    for op in body.upsertions:
        code = _upsert(zk, op, duplicated) if errors.get(op.name, (0,))[0] == 0 else errors[op.name]
        errors[op.name] = code
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        _AlterResult(user=user, error_code=code, error_message=message) for user, (code, message) in errors.items()])


def _mechanism(op, duplicated) -> tuple[str | None, tuple[int, str | None]]:
    if (op.name, op.mechanism) in duplicated:
        return None, (DUPLICATE_RESOURCE, f"a user credential cannot be altered twice in the same request: {op.name}")
    name = SCRAM_MECHANISMS.get(op.mechanism)
    if name is None:
        return None, (UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {op.mechanism}")
    return name, (0, None)


def _delete(zk, op, duplicated) -> tuple[int, str | None]:
    mechanism, error = _mechanism(op, duplicated)
    if mechanism is None:
        return error
    if not delete_credential(zk, op.name, mechanism):
        return RESOURCE_NOT_FOUND, f"attempt to delete a user credential that does not exist: {op.name}"
    return 0, None


def _upsert(zk, op, duplicated) -> tuple[int, str | None]:
    mechanism, error = _mechanism(op, duplicated)
    if mechanism is None:
        return error
    if not MIN_ITERATIONS <= op.iterations <= MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, f"{mechanism} iterations {op.iterations} not in [{MIN_ITERATIONS}, " \
                                        f"{MAX_ITERATIONS}]"
    if not op.salt or not op.salted_password or mechanism not in MECHANISMS:
        return UNACCEPTABLE_CREDENTIAL, "empty salt or salted password"
    store_salted(zk, op.name, mechanism, bytes(op.salt), bytes(op.salted_password), op.iterations)
    return 0, None


SECURITY_HANDLERS = {
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}

"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51), version 0, flexible.
Transcribed from Kafka's DescribeUserScramCredentialsRequest.json / ...Response.json and
AlterUserScramCredentialsRequest.json / ...Response.json (KIP-554).

``mechanism`` is Kafka's ScramMechanism type: 0 unknown, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512. A Describe with
``users`` None describes every user. An upsertion carries the salt and the salted password (Hi(password, salt,
iterations)), never the password: the broker derives stored_key and server_key from it.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeUserScramCredentialsRequest", "DescribeUserScramCredentialsResponse",
           "AlterUserScramCredentialsRequest", "AlterUserScramCredentialsResponse", "SCRAM_MECHANISMS"]

SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism type -> mechanism name

DescribeUserScramCredentialsRequest = message(
    "DescribeUserScramCredentialsRequest", api_key=ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, versions="0",
    flexible="0+", module=__name__, fields=[
        F("users", "[]UserName", "0+", nullable="0+", default=None, fields=[
            F("name", "string", "0+"),
        ]),
    ])

DescribeUserScramCredentialsResponse = message(
    "DescribeUserScramCredentialsResponse", api_key=ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, versions="0",
    flexible="0+", module=__name__, fields=[
        F("throttle_time_ms", "int32", "0+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("results", "[]DescribeUserScramCredentialsResult", "0+", fields=[
            F("user", "string", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+", default=None),
            F("credential_infos", "[]CredentialInfo", "0+", fields=[
                F("mechanism", "int8", "0+"),
                F("iterations", "int32", "0+"),
            ]),
        ]),
    ])

AlterUserScramCredentialsRequest = message(
    "AlterUserScramCredentialsRequest", api_key=ApiKey.ALTER_USER_SCRAM_CREDENTIALS, versions="0",
    flexible="0+", module=__name__, fields=[
        F("deletions", "[]ScramCredentialDeletion", "0+", fields=[
            F("name", "string", "0+"),
            F("mechanism", "int8", "0+"),
        ]),
        F("upsertions", "[]ScramCredentialUpsertion", "0+", fields=[
            F("name", "string", "0+"),
            F("mechanism", "int8", "0+"),
            F("iterations", "int32", "0+"),
            F("salt", "bytes", "0+"),
            F("salted_password", "bytes", "0+"),
        ]),
    ])

AlterUserScramCredentialsResponse = message(
    "AlterUserScramCredentialsResponse", api_key=ApiKey.ALTER_USER_SCRAM_CREDENTIALS, versions="0",
    flexible="0+", module=__name__, fields=[
        F("throttle_time_ms", "int32", "0+"),
        F("results", "[]AlterUserScramCredentialsResult", "0+", fields=[
            F("user", "string", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+", default=None),
        ]),
    ])

"""SCRAM and PLAIN exchanges against RFC 7677's test vector and hostile tokens: the server side
(broker/security/mechanisms.py) and the client side (protocol/sasl_client.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from sparklog.broker.security.mechanisms import AuthenticationFailed, PlainServer, ScramServer
from sparklog.coordination.scram_credentials import credential_from_salted, salted_password
from sparklog.protocol.sasl_client import PlainClient, SaslClientError, ScramClient

# RFC 7677 section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
C_NONCE = "rOprNGfwEbeRWgbNEkqO"
S_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FIRST = f"n,,n=user,r={C_NONCE}"
SERVER_FIRST = f"r={C_NONCE}{S_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = f"c=biws,r={C_NONCE}{S_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _credentials(password: str = "pencil"):
    cred = credential_from_salted("SCRAM-SHA-256", SALT, salted_password("SCRAM-SHA-256", password, SALT, 4096), 4096)
    table = {("user", "SCRAM-SHA-256"): (cred.salt, cred.stored_key, cred.server_key, cred.iterations)}
    return lambda user, mechanism: table.get((user, mechanism))


def _server(s_nonce: str = S_NONCE) -> ScramServer:
    return ScramServer("SCRAM-SHA-256", _credentials(), s_nonce=s_nonce)


def test_the_server_follows_rfc_7677s_exchange():
    server = _server()
    assert server.step(CLIENT_FIRST.encode()) == (SERVER_FIRST.encode(), None)
    assert server.step(CLIENT_FINAL.encode()) == (SERVER_FINAL.encode(), "user")


def test_the_client_follows_rfc_7677s_exchange():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", c_nonce=C_NONCE)
    assert client.first() == CLIENT_FIRST.encode()
    assert client.step(SERVER_FIRST.encode()) == CLIENT_FINAL.encode()
    assert client.step(SERVER_FINAL.encode()) is None


def test_a_client_refuses_a_server_that_does_not_know_the_password():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", c_nonce=C_NONCE)
    client.first()
    client.step(SERVER_FIRST.encode())
    with pytest.raises(SaslClientError):
        client.step(b"v=" + base64.b64encode(b"\x00" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_and_server_agree_on_both_mechanisms(mechanism):
    salt = b"s" * 16
    cred = credential_from_salted(mechanism, salt, salted_password(mechanism, "pw", salt, 4096), 4096)
    server = ScramServer(mechanism, lambda u, m: (cred.salt, cred.stored_key, cred.server_key, 4096)
                         if (u, m) == ("alice", mechanism) else None)
    client = ScramClient(mechanism, "alice", "pw")
    reply, user = server.step(client.first())
    final, user = server.step(client.step(reply))
    assert user == "alice" and client.step(final) is None


def test_a_wrong_password_is_refused():
    client = ScramClient("SCRAM-SHA-256", "user", "not-pencil")
    server = _server()
    reply, _ = server.step(client.first())
    with pytest.raises(AuthenticationFailed):
        server.step(client.step(reply))


def test_an_unknown_user_is_refused_at_client_first():
    with pytest.raises(AuthenticationFailed):
        _server().step(b"n,,n=mallory,r=abc")


def test_a_replayed_client_final_is_refused():
    """RFC 7677's client-final, valid for its server nonce, sent to an exchange with another nonce."""
    server = _server(s_nonce="another-nonce-of-the-server")
    server.step(CLIENT_FIRST.encode())
    with pytest.raises(AuthenticationFailed):
        server.step(CLIENT_FINAL.encode())


@pytest.mark.parametrize("cut", [1, 10, len(CLIENT_FINAL) // 2, len(CLIENT_FINAL) - 3])
def test_a_truncated_client_final_is_refused(cut):
    server = _server()
    server.step(CLIENT_FIRST.encode())
    with pytest.raises(AuthenticationFailed):
        server.step(CLIENT_FINAL[:cut].encode())


def _proof(client_final_without_proof: str) -> str:
    salted = salted_password("SCRAM-SHA-256", "pencil", SALT, 4096)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()
    auth_message = f"{CLIENT_FIRST[3:]},{SERVER_FIRST},{client_final_without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, "sha256")
    return base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()


def test_a_client_final_with_a_nonce_other_than_the_servers_is_refused_even_with_a_valid_proof():
    """The proof is computed (with the password) over a client-final naming only the client's own nonce: only the
    nonce check can refuse it."""
    without_proof = f"c=biws,r={C_NONCE}"
    server = _server()
    server.step(CLIENT_FIRST.encode())
    with pytest.raises(AuthenticationFailed):
        server.step(f"{without_proof},p={_proof(without_proof)}".encode())


def test_the_hand_made_proof_is_right_when_the_nonce_is():
    """The same hand-made proof over the right nonce is accepted: the test above fails for the nonce alone."""
    without_proof = f"c=biws,r={C_NONCE}{S_NONCE}"
    server = _server()
    server.step(CLIENT_FIRST.encode())
    assert server.step(f"{without_proof},p={_proof(without_proof)}".encode())[1] == "user"


def test_librdkafka_before_2_6_1s_client_final_echoing_the_client_nonce_twice_is_accepted():
    """librdkafka < 2.6.1 (Debian's kcat: 2.0.2) sends r=<client nonce><client nonce><server nonce>
    (confluentinc/librdkafka#4895), with a valid proof over that message; Kafka 3.8.1-3.9 accept it."""
    without_proof = f"c=biws,r={C_NONCE}{C_NONCE}{S_NONCE}"
    server = _server()
    server.step(CLIENT_FIRST.encode())
    reply, user = server.step(f"{without_proof},p={_proof(without_proof)}".encode())
    assert user == "user" and reply.startswith(b"v=")


@pytest.mark.parametrize("nonce", [f"x{C_NONCE}{S_NONCE}", f"{C_NONCE}{C_NONCE}{S_NONCE[:-1]}",
                                   f"{C_NONCE}{C_NONCE}{C_NONCE}{S_NONCE}", f"{S_NONCE}{C_NONCE}{S_NONCE}"])
def test_no_other_nonce_than_the_servers_or_librdkafkas_old_form_is_accepted_even_with_a_valid_proof(nonce):
    without_proof = f"c=biws,r={nonce}"
    server = _server()
    server.step(CLIENT_FIRST.encode())
    with pytest.raises(AuthenticationFailed):
        server.step(f"{without_proof},p={_proof(without_proof)}".encode())


def test_scram_takes_no_third_token():
    server = _server()
    server.step(CLIENT_FIRST.encode())
    server.step(CLIENT_FINAL.encode())
    with pytest.raises(AuthenticationFailed):
        server.step(CLIENT_FINAL.encode())


@pytest.mark.parametrize("token", [b"\x00alice\x00wrong", b"\x00bob\x00alice-pw", b"\x00alice", b"x\x00alice\x00alice-pw",
                                   b"\x00\x00alice-pw", b"\x00alice\x00alice-pw\x00", b"\x00alice\x00\xff"])
def test_plain_refuses_wrong_or_malformed_tokens(token):
    with pytest.raises(AuthenticationFailed):
        PlainServer({"alice": "alice-pw"}).step(token)


def test_plain_accepts_the_right_password_once():
    server = PlainServer({"alice": "alice-pw"})
    assert server.step(PlainClient("alice", "alice-pw").first()) == (b"", "alice")
    with pytest.raises(AuthenticationFailed):
        server.step(PlainClient("alice", "alice-pw").first())

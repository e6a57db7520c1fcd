"""Server side of SASL/PLAIN (RFC 4616) and SASL/SCRAM-SHA-256/512 (RFC 5802, RFC 7677).

Pure logic, no I/O: the network layer feeds client tokens in and sends challenges out.
Failure messages are the ones Kafka's PlainSaslServer / ScramSaslServer put in the
SaslAuthenticate response, so a client sees the same text as against a real broker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

SCRAM_ITERATIONS = 4096
"""Kafka's default (and minimum) iteration count for SCRAM credentials."""

_SCRAM_HASHES: dict[str, Callable[[], hashlib._Hash]] = {
    "SCRAM-SHA-256": hashlib.sha256,
    "SCRAM-SHA-512": hashlib.sha512,
}
SUPPORTED_MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslAuthenticationFailed(Exception):
    """Authentication failed; `str(exc)` is the error message the broker sends back."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def scram_credential(
    password: str, mechanism: str, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS
) -> ScramCredential:
    """What a broker stores for a SCRAM user (it never keeps the password)."""
    hash_name = _SCRAM_HASHES[mechanism]().name
    salt = secrets.token_bytes(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = _hmac(hash_name, salted, b"Server Key")
    return ScramCredential(salt, iterations, stored_key, server_key)


class SaslUsers:
    """Username -> password, with SCRAM credentials derived once (PBKDF2 is too slow per login)."""

    def __init__(self, users: Mapping[str, str], mechanisms: tuple[str, ...]) -> None:
        unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms {unknown}; use {SUPPORTED_MECHANISMS}")
        self.mechanisms = mechanisms
        self._passwords = dict(users)
        self._scram: dict[str, dict[str, ScramCredential]] = {
            mechanism: {name: scram_credential(pw, mechanism) for name, pw in users.items()}
            for mechanism in mechanisms
            if mechanism in _SCRAM_HASHES
        }

    def password(self, username: str) -> str | None:
        return self._passwords.get(username)

    def scram(self, mechanism: str, username: str) -> ScramCredential | None:
        return self._scram.get(mechanism, {}).get(username)

    def new_server(self, mechanism: str) -> SaslServer:
        if mechanism == "PLAIN":
            return PlainServer(self)
        return ScramServer(self, mechanism)


class SaslAuthority(Protocol):
    """What a listener asks about SASL: the mechanisms it enables, and a server per connection
    (`SaslUsers` for PLAIN/SCRAM; `kafka_sim.msk_iam.MskIamAuthority` for MSK IAM)."""

    @property
    def mechanisms(self) -> tuple[str, ...]: ...

    def new_server(self, mechanism: str) -> SaslServer: ...


class SaslServer(Protocol):
    complete: bool
    username: str | None

    def evaluate(self, token: bytes) -> bytes:
        """Consume one client token; return the challenge (b"" when none). Raises on failure."""
        ...


class PlainServer:
    """RFC 4616: one message `authzid NUL authcid NUL passwd`."""

    def __init__(self, users: SaslUsers) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.decode("utf-8", errors="replace").split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
            )
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.password(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different"
                " from username"
            )
        self.username = username
        self.complete = True
        return b""


def _scram_attributes(message: str) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise ValueError(f"invalid SCRAM attribute {item!r}")
        attributes[key] = value
    return attributes


def _saslname(value: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='."""
    return value.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """RFC 5802 server: client-first -> server-first -> client-final -> server-final."""

    def __init__(self, users: SaslUsers, mechanism: str) -> None:
        self._users = users
        self._mechanism = mechanism
        self._hash_name = _SCRAM_HASHES[mechanism]().name
        self._step = 0
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.complete = False
        self.username: str | None = None

    def _invalid_credentials(self) -> SaslAuthenticationFailed:
        # Kafka turns ScramSaslServer's SaslException into this message.
        return SaslAuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials with SASL"
            f" mechanism {self._mechanism}"
        )

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
            if self._step == 0:
                return self._client_first(message)
            if self._step == 1:
                return self._client_final(message)
        except (UnicodeDecodeError, ValueError, KeyError) as exc:
            raise self._invalid_credentials() from exc
        raise self._invalid_credentials()

    def _client_first(self, message: str) -> bytes:
        cbind, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if cbind not in ("n", "y"):
            raise ValueError("channel binding is not supported")
        self._gs2_header = f"{cbind},{authzid},"
        attributes = _scram_attributes(bare)
        username = _saslname(attributes["n"])
        if authzid and _saslname(authzid.removeprefix("a=")) != username:
            raise ValueError("authorization id differs from username")
        credential = self._users.scram(self._mechanism, username)
        if credential is None:
            raise ValueError("unknown user")
        self._credential = credential
        self.username = username
        self._client_first_bare = bare
        self._nonce = attributes["r"] + secrets.token_urlsafe(24)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._step = 1
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        assert self._credential is not None
        without_proof, _, proof_attr = message.rpartition(",p=")
        attributes = _scram_attributes(without_proof)
        if base64.b64decode(attributes["c"]) != self._gs2_header.encode():
            raise ValueError("channel binding mismatch")
        if attributes["r"] != self._nonce:
            raise ValueError("nonce mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._hash_name, self._credential.stored_key, auth_message)
        proof = base64.b64decode(proof_attr)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        computed = hashlib.new(self._hash_name, client_key).digest()
        if not hmac.compare_digest(computed, self._credential.stored_key):
            raise ValueError("invalid client proof")
        server_signature = _hmac(self._hash_name, self._credential.server_key, auth_message)
        self._step = 2
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)

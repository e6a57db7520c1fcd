"""A small OIDC provider on loopback for the OAUTHBEARER tests: a JWKS endpoint and a
client-credentials token endpoint, each over HTTPS with a test CA (tests/security/pki.py), an RSA
key made per run, RS256 JWTs signed with `cryptography` (already a test dependency; a JWT is
three base64url parts, no library needed).

The two endpoints listen on separate ports, so that the token endpoint can go down (its port
closed: connection refused) while the broker keeps the JWKS it validates with.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from security.pki import issue

AUDIENCE = "kafka-broker"
ISSUER_PATH = "/realms/kafka"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _uint(number: int) -> bytes:
    return number.to_bytes((number.bit_length() + 7) // 8, "big")


@dataclass
class Client:
    """A registered client and the claims of the tokens it is given."""

    secret: str
    subject: str
    lifetime_seconds: float = 300.0
    audience: str | None = None
    """None: the provider's AUDIENCE."""
    issuer: str | None = None
    """None: the provider's issuer."""
    revoked: bool = False


@dataclass
class OidcProvider:
    directory: Path
    clients: dict[str, Client] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    """One entry per token request: client id, grant type, scope, status answered, and the
    token's `exp` (`expires_at`) when one was issued."""

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        ca = issue(self.directory, "oidc-ca", None, ca=True)
        issue(self.directory, "oidc", ca, dns=("localhost",), ips=("127.0.0.1",))
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:16]
        self._lock = threading.Lock()
        self._jwks = self._serve(0)
        self._token: ThreadingHTTPServer | None = self._serve(0)
        self.token_port = self._token.server_address[1]

    # -- addresses -----------------------------------------------------------------------
    @property
    def ca_file(self) -> str:
        return str(self.directory / "oidc-ca.crt")

    @property
    def jwks_url(self) -> str:
        return f"https://127.0.0.1:{self._jwks.server_address[1]}/jwks"

    @property
    def token_url(self) -> str:
        return f"https://127.0.0.1:{self.token_port}/token"

    @property
    def issuer(self) -> str:
        return f"https://127.0.0.1:{self._jwks.server_address[1]}{ISSUER_PATH}"

    # -- control -------------------------------------------------------------------------
    def add_client(self, client_id: str, client: Client) -> None:
        with self._lock:
            self.clients[client_id] = client

    def revoke(self, client_id: str) -> None:
        with self._lock:
            self.clients[client_id].revoked = True

    def token_requests(self, client_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["client_id"] == client_id]

    def stop_token_endpoint(self) -> None:
        """Close the token endpoint's port: a client gets connection refused."""
        server, self._token = self._token, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def start_token_endpoint(self) -> None:
        if self._token is None:
            self._token = self._serve(self.token_port)

    def close(self) -> None:
        self.stop_token_endpoint()
        self._jwks.shutdown()
        self._jwks.server_close()

    # -- tokens --------------------------------------------------------------------------
    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                          "n": b64url(_uint(numbers.n)), "e": b64url(_uint(numbers.e))}]}

    def sign(self, claims: Mapping[str, Any]) -> str:
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = (b64url(json.dumps(header).encode()) + "."
                         + b64url(json.dumps(dict(claims)).encode()))
        signature = self._key.sign(signing_input.encode("ascii"), padding.PKCS1v15(),
                                   hashes.SHA256())
        return signing_input + "." + b64url(signature)

    def token_for(self, client: Client, scope: str | None = None,
                  now: float | None = None) -> str:
        issued = int(now if now is not None else time.time())
        claims: dict[str, Any] = {
            "iss": client.issuer or self.issuer,
            "sub": client.subject,
            "aud": client.audience or AUDIENCE,
            "iat": issued,
            "exp": issued + int(client.lifetime_seconds),
            "jti": uuid.uuid4().hex,
        }
        if scope:
            claims["scope"] = scope
        return self.sign(claims)

    # -- HTTP ----------------------------------------------------------------------------
    def _serve(self, port: int) -> ThreadingHTTPServer:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _answer(self, status: int, document: Mapping[str, Any]) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/jwks":
                    self._answer(200, provider.jwks())
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                status, document = provider._token_answer(self.path, self.headers, form)
                if status == 302:  # /moved: elsewhere on this endpoint
                    self.send_response(302)
                    self.send_header("Location", str(document["location"]))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._answer(status, document)

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.directory / "oidc.crt"), str(self.directory / "oidc.key"))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def _token_answer(self, path: str, headers: Any,
                      form: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        client_id, secret = "", ""
        authorization = headers.get("Authorization") or ""
        if authorization.startswith("Basic "):
            decoded = base64.b64decode(authorization[6:]).decode()
            client_id, _, secret = decoded.partition(":")
        with self._lock:
            client = self.clients.get(client_id)
            if path == "/moved":
                return 302, {"location": "/token"}
            if path != "/token":
                status, document = 404, {"error": "not_found"}
            elif form.get("grant_type") != "client_credentials":
                status, document = 400, {"error": "unsupported_grant_type"}
            elif client is None or client.secret != secret or client.revoked:
                status, document = 401, {"error": "invalid_client",
                                         "error_description": "Invalid client credentials"}
            else:
                lifetime = int(client.lifetime_seconds)
                issued = time.time()
                expires_at = int(issued) + lifetime  # the token's exp
                status, document = 200, {
                    "access_token": self.token_for(client, form.get("scope"), now=issued),
                    "token_type": "Bearer", "expires_in": lifetime}
            self.requests.append({"client_id": client_id, "grant_type": form.get("grant_type"),
                                  "scope": form.get("scope"), "status": status})
            if status == 200:
                self.requests[-1]["expires_at"] = expires_at
        return status, document

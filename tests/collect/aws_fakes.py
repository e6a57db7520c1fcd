"""Local fakes, on 127.0.0.1, of the AWS endpoints a credential chain talks to: EC2 instance
metadata (IMDSv2), the container credentials endpoint (ECS / EKS Pod Identity) and STS
(AssumeRole, AssumeRoleWithWebIdentity, query protocol with XML answers). Each records what
it was asked, so a test can see which link of the chain botocore used."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

IMDS_TOKEN = "imds-session-token"
CONTAINER_AUTHORIZATION = "pod-identity-authorization-token"
ROLE_NAME = "exporter-instance-role"


@dataclass
class FakeAws:
    port: int = 0
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    """(method, path, STS form or headers of interest) in arrival order."""
    sts_error: str | None = None
    """An STS error code to answer with (e.g. ExpiredTokenException) instead of credentials."""
    expires_in_seconds: int = 3600
    issued: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def next_credentials(self, prefix: str) -> dict[str, str]:
        with self.lock:
            self.issued += 1
            number = self.issued
        expiry = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.expires_in_seconds)
        return {
            "AccessKeyId": f"{prefix}{number:04d}",
            "SecretAccessKey": f"fake-secret-{prefix}-{number}",
            "Token": f"fake-session-{prefix}-{number}",
            "Expiration": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }

    def actions(self) -> list[str]:
        return [form.get("Action", path) for _, path, form in self.requests]


def _sts_answer(action: str, credentials: dict[str, str]) -> str:
    return (
        f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        f"<{action}Result><Credentials>"
        f"<AccessKeyId>{credentials['AccessKeyId']}</AccessKeyId>"
        f"<SecretAccessKey>{credentials['SecretAccessKey']}</SecretAccessKey>"
        f"<SessionToken>{credentials['Token']}</SessionToken>"
        f"<Expiration>{credentials['Expiration']}</Expiration>"
        "</Credentials><AssumedRoleUser>"
        "<AssumedRoleId>AROAEXAMPLE:session</AssumedRoleId>"
        "<Arn>arn:aws:sts::123456789012:assumed-role/exporter/session</Arn>"
        f"</AssumedRoleUser></{action}Result>"
        "<ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )


def _sts_error(code: str) -> str:
    return (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        f"<Error><Type>Sender</Type><Code>{code}</Code><Message>refused by the fake</Message>"
        "</Error><RequestId>fake</RequestId></ErrorResponse>"
    )


def _handler(fake: FakeAws) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _reply(self, status: int, body: str, content_type: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:  # IMDSv2 session token
            fake.requests.append(("PUT", self.path, {}))
            if self.path == "/latest/api/token":
                self._reply(200, IMDS_TOKEN)
            else:
                self._reply(404, "")

        def do_GET(self) -> None:
            fake.requests.append(("GET", self.path, {
                "Authorization": self.headers.get("Authorization", ""),
                "X-aws-ec2-metadata-token": self.headers.get("X-aws-ec2-metadata-token", ""),
            }))
            if self.path.startswith("/latest/meta-data/iam/security-credentials/"):
                if self.headers.get("X-aws-ec2-metadata-token") != IMDS_TOKEN:
                    self._reply(401, "")
                elif self.path.endswith("/security-credentials/"):
                    self._reply(200, ROLE_NAME)
                else:
                    answer = {"Code": "Success", "Type": "AWS-HMAC",
                              **fake.next_credentials("ASIAIMDS")}
                    self._reply(200, json.dumps(answer), "application/json")
            elif self.path == "/container-credentials":
                if self.headers.get("Authorization") != CONTAINER_AUTHORIZATION:
                    self._reply(403, json.dumps({"code": "AccessDenied"}), "application/json")
                else:
                    self._reply(200, json.dumps(fake.next_credentials("ASIAPOD")),
                                "application/json")
            else:
                self._reply(404, "")

        def do_POST(self) -> None:  # STS, query protocol
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(parse_qsl(self.rfile.read(length).decode()))
            fake.requests.append(("POST", self.path, form))
            action = form.get("Action", "")
            if fake.sts_error is not None:
                self._reply(400, _sts_error(fake.sts_error), "text/xml")
            elif action in ("AssumeRole", "AssumeRoleWithWebIdentity"):
                prefix = "ASIAROLE" if action == "AssumeRole" else "ASIAIRSA"
                self._reply(200, _sts_answer(action, fake.next_credentials(prefix)), "text/xml")
            else:
                self._reply(400, _sts_error("InvalidAction"), "text/xml")

    return Handler


@contextmanager
def fake_aws() -> Iterator[FakeAws]:
    fake = FakeAws()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

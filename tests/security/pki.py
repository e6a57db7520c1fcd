"""Certificates generated per test (cryptography): a CA, broker/server certs, client certs.

Also used by tests/test_http.py. Why not the helpers in tests/collect: those make one
self-signed cert or one CA with `localhost` only; the security tests need IP SANs (the
simulator advertises 127.0.0.1), a cert for the wrong host, and a second, untrusted CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Issuer = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def issue(directory: Path, name: str, issuer: Issuer | None, *, ca: bool = False,
          dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> Issuer:
    """Write `name`.crt / `name`.key (PEM) signed by `issuer` (self-signed when None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{name}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return cert, key


@dataclass(frozen=True)
class Pki:
    directory: Path

    def crt(self, name: str) -> str:
        return str(self.directory / f"{name}.crt")

    def key(self, name: str) -> str:
        return str(self.directory / f"{name}.key")


def make_pki(directory: Path) -> Pki:
    """ca (trusted), other-ca (not trusted); broker (127.0.0.1 + localhost), wrong-host
    (only broker.invalid), client (signed by ca), rogue-client (signed by other-ca)."""
    ca = issue(directory, "ca", None, ca=True)
    other = issue(directory, "other-ca", None, ca=True)
    issue(directory, "broker", ca, dns=("localhost",), ips=("127.0.0.1",))
    issue(directory, "wrong-host", ca, dns=("broker.invalid",))
    issue(directory, "client", ca, dns=("exporter",))
    issue(directory, "rogue-client", other, dns=("exporter",))
    return Pki(directory)

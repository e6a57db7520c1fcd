"""Load a certificate and private key without ever asking a terminal for a passphrase.

OpenSSL prompts "Enter PEM pass phrase:" on the controlling terminal when a key is encrypted
and no password is given, and a daemon then blocks forever. Every key the exporter loads (the
web server's, the Kafka client's) goes through `load_cert_chain` here, which always hands
OpenSSL a password callback: the configured passphrase, or one that refuses, so an encrypted
key without `key_password_file` is a ConfigError naming the field and the file.
"""

from __future__ import annotations

import os
import ssl
import stat
from collections.abc import Callable

from exporter.errors import ConfigError


class NoPassphrase(Exception):
    """Raised by the password callback when the key is encrypted and none was configured."""


def password_callback(key_password: str | None) -> Callable[[], bytes]:
    """For `SSLContext.load_cert_chain(password=...)`: never OpenSSL's interactive prompt."""

    def supply() -> bytes:
        if key_password is None:
            raise NoPassphrase
        return key_password.encode("utf-8")

    return supply


def require_regular_file(path: str, where: str) -> None:
    """OpenSSL would wait forever on a FIFO: only a regular file is read. A path
    that does not exist is left to the loader's own error."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{where}: {path!r} is not a regular file")


def load_cert_chain(
    context: ssl.SSLContext,
    cert_file: str,
    key_file: str,
    key_password: str | None,
    where: str,
) -> None:
    """`context.load_cert_chain`, with errors naming `where` (e.g. `clusters[0].tls`)."""
    require_regular_file(cert_file, f"{where}.cert_file")
    require_regular_file(key_file, f"{where}.key_file")
    try:
        context.load_cert_chain(cert_file, key_file, password=password_callback(key_password))
    except NoPassphrase:
        raise ConfigError(
            f"{where}.key_file: {key_file!r} is an encrypted private key; give its passphrase "
            "in a file with key_password_file"
        ) from None
    except ssl.SSLError as exc:
        if key_password is not None and exc.reason is None:
            # OpenSSL says only "PEM lib" for a wrong passphrase (and for an unreadable key).
            raise ConfigError(
                f"{where}.key_password_file: cannot decrypt {key_file!r} with this passphrase "
                "(or the key file is not a PEM private key)"
            ) from None
        detail = exc.reason or "not a PEM certificate and private key"
        raise ConfigError(
            f"{where}: cannot load cert_file/key_file ({cert_file!r}, {key_file!r}): {detail}"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{where}: cannot load cert_file/key_file ({cert_file!r}, {key_file!r}): "
            f"{exc.strerror or exc}"
        ) from None

"""A real MIT Kerberos KDC on a loopback port, for the GSSAPI tests (tests/realkafka).

Its own realm, database, kdc.conf and krb5.conf in a temporary directory; principals and
keytabs made with kadmin.local (scripts/install-test-deps installs krb5-kdc and
krb5-admin-server). Service principals use the host name `localhost`: the broker's GSSAPI
listener advertises it and the client's krb5.conf turns off host name canonicalization, so
both sides name the same principal, kafka/localhost@REALM.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka_sim.realkafka import free_port

REALM = "KTE.TEST"
MASTER_PASSWORD = "kdc-master-pw-5e1d"
SBIN = ("/usr/sbin", "/usr/local/sbin")


def kdc_program(name: str) -> str:
    for directory in SBIN:
        candidate = Path(directory) / name
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: run scripts/install-test-deps")
    return found


@dataclass
class Kdc:
    """The running KDC; `env` points the Kerberos tools and library at its files."""

    directory: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def krb5_conf(self) -> str:
        return str(self.directory / "krb5.conf")

    def kadmin(self, query: str) -> str:
        done = subprocess.run(
            [kdc_program("kadmin.local"), "-r", REALM, "-q", query],
            env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )
        if done.returncode != 0 or "error" in done.stderr.lower():
            raise RuntimeError(f"kadmin.local {query!r}: {done.stdout} {done.stderr}")
        return done.stdout

    def add_principal(self, name: str, keytab: Path | None = None,
                      max_life: str | None = None) -> str:
        """A principal with a random key (written to `keytab` when given); its full name."""
        life = f' -maxlife "{max_life}"' if max_life else ""
        self.kadmin(f"addprinc -randkey{life} {name}")
        if keytab is not None:
            self.kadmin(f"ktadd -k {keytab} {name}")
        return f"{name}@{REALM}"

    def new_key(self, name: str, keytab: Path) -> None:
        """A new random key for `name`, written to `keytab`: older keytabs go stale."""
        self.kadmin(f"ktadd -k {keytab} {name}")

    def start(self, timeout: float = 60.0) -> None:
        self.process = subprocess.Popen(
            [kdc_program("krb5kdc"), "-n", "-r", REALM],
            env=self.env, stdout=subprocess.DEVNULL,
            stderr=open(self.directory / "krb5kdc.stderr", "ab"),  # noqa: SIM115
        )
        deadline = time.monotonic() + timeout
        while not _accepts(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"krb5kdc exited: {self.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"KDC not listening on {self.port} after {timeout} s")
            time.sleep(0.1)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)

    def log_text(self) -> str:
        parts = [self.directory / "krb5kdc.log", self.directory / "krb5kdc.stderr"]
        return "".join(p.read_text(errors="replace") for p in parts if p.exists())


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def write_krb5_conf(directory: Path, port: int) -> Path:
    """The clients' and the broker's krb5.conf: TCP to the KDC on loopback, no DNS."""
    conf = directory / "krb5.conf"
    conf.write_text(
        "[libdefaults]\n"
        f"  default_realm = {REALM}\n"
        "  dns_lookup_kdc = false\n"
        "  dns_lookup_realm = false\n"
        "  dns_canonicalize_hostname = false\n"
        "  rdns = false\n"
        "  udp_preference_limit = 1\n"
        "  forwardable = false\n"
        "  ticket_lifetime = 10h\n"
        "[realms]\n"
        f"  {REALM} = {{\n"
        f"    kdc = 127.0.0.1:{port}\n"
        f"    admin_server = 127.0.0.1:{port}\n"
        "  }\n"
        "[domain_realm]\n"
        f"  localhost = {REALM}\n"
    )
    return conf


def start_kdc(directory: Path) -> Kdc:
    """Create the realm's database and start krb5kdc on a free loopback port."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (directory / "kdc.conf").write_text(
        "[kdcdefaults]\n"
        f"  kdc_ports = {port}\n"
        f"  kdc_tcp_listen = 127.0.0.1:{port}\n"
        f"  kdc_listen = 127.0.0.1:{port}\n"
        "[realms]\n"
        f"  {REALM} = {{\n"
        f"    database_name = {directory / 'principal'}\n"
        f"    key_stash_file = {directory / 'stash'}\n"
        f"    acl_file = {directory / 'kadm5.acl'}\n"
        "    max_life = 10h\n"
        "    max_renewable_life = 0\n"
        "    default_principal_flags = +preauth\n"
        "    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
        "  }\n"
        "[logging]\n"
        f"  kdc = FILE:{directory / 'krb5kdc.log'}\n"
    )
    (directory / "kadm5.acl").write_text("")
    write_krb5_conf(directory, port)
    env = {
        **os.environ,
        "KRB5_CONFIG": str(directory / "krb5.conf"),
        "KRB5_KDC_PROFILE": str(directory / "kdc.conf"),
    }
    created = subprocess.run(
        [kdc_program("kdb5_util"), "-r", REALM, "-P", MASTER_PASSWORD, "create", "-s"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    if created.returncode != 0:
        raise RuntimeError(f"kdb5_util create: {created.stdout} {created.stderr}")
    kdc = Kdc(directory, port, env=env)
    kdc.start()
    return kdc

"""Certificates for the TLS tests, made with the openssl command: a CA, a server certificate
for 127.0.0.1 and localhost, a client certificate, and a second CA that signed neither (but
signed an intruder's certificate for 127.0.0.1)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(cwd: Path, name: str, ca: str, *, subject: str, san: str) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-subj", subject, "-out", f"{name}.csr", cwd=cwd)  # fmt: skip
    (cwd / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
             cwd=cwd)  # fmt: skip


def make_certs(d: Path) -> Path:
    """ca.pem / ca.key, server.pem / server.key (127.0.0.1, localhost), client.pem /
    client.key (signed by ca), other-ca.pem and intruder.pem / intruder.key (127.0.0.1,
    signed by other-ca) in ``d``; ``d``."""
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                 "-subj", f"/CN=rocketstore test {ca}", "-days", "2", "-out", f"{ca}.pem",
                 cwd=d)  # fmt: skip
    _signed(d, "server", "ca", subject="/CN=127.0.0.1", san="IP:127.0.0.1,DNS:localhost")
    _signed(d, "client", "ca", subject="/CN=client", san="DNS:client")
    _signed(d, "intruder", "other-ca", subject="/CN=127.0.0.1", san="IP:127.0.0.1")
    return d


def tls_flags(certs: Path, mode: str) -> list[str]:
    """``serve`` / ``broker`` / ``namesrv`` flags for TLS ``mode`` with ``certs``' server pair."""
    flags = ["--tls-mode", mode]
    if mode != "disabled":
        flags += ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key")]
    return flags

"""A private CA and the local broker's certificate, made once with ``cryptography`` (PEM).

``ensure_certificates(folder)`` writes ``ca.pem`` (what clients trust), ``broker.pem`` (the
broker's unencrypted PKCS#8 key followed by its certificate, as Kafka's PEM key store reads it)
and ``broker-cert.pem``; the broker's certificate names ``127.0.0.1`` and ``localhost``, so
clients keep hostname verification on. Existing files are kept.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 825


@dataclass(frozen=True)
class Certificates:
    ca: Path
    broker_key_and_cert: Path
    broker_cert: Path


def ensure_certificates(folder: Path, *, common_name: str = "memstack-broker") -> Certificates:
    """The CA and broker certificate under ``folder``, generated unless they exist."""
    certs = Certificates(folder / "ca.pem", folder / "broker.pem", folder / "broker-cert.pem")
    if all(p.is_file() for p in (certs.ca, certs.broker_key_and_cert, certs.broker_cert)):
        return certs
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memstack local CA")])
    ca = (_builder(ca_name, ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    alt = x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                       x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (_builder(name, ca_name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(alt, critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    _write(certs.broker_key_and_cert, pem_key + pem_cert, private=True)
    _write(certs.broker_cert, pem_cert)
    _write(certs.ca, ca.public_bytes(serialization.Encoding.PEM))
    return certs


def _builder(subject: x509.Name, issuer: x509.Name,
             public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS)))


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)

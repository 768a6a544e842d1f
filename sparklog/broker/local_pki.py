"""A throwaway certificate authority for clusters on this machine (`sparklog demo --secure`, the tests), made with
`cryptography` into a directory of PEM files (private keys 0600): a CA, a broker certificate for
localhost/127.0.0.1 signed by it, client certificates, an expired one, and a second CA nobody trusts. Never for
a real deployment: the CA's key is not kept and every certificate lives 30 days.

    pki = make_pki(tmp_dir)
    pki.ca                 # PEM path of the trusted CA
    pki.broker             # Bundle: .cert, .key (PEM paths), .keystore (key + chain in one PEM file)
    pki.client("CN=alice,OU=eng,O=acme")   # a client Bundle signed by the CA (subject in RFC 4514 form)
    pki.server("CN=localhost,OU=internal")  # another server Bundle for localhost/127.0.0.1 signed by the CA
    pki.expired, pki.untrusted             # bundles for localhost: expired; signed by another CA
    pki.pkcs12(bundle, password)           # the bundle as a PKCS12 key store file
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

_DAY = datetime.timedelta(days=1)
_HOSTS = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))


@dataclass(frozen=True)
class Bundle:
    cert: Path
    key: Path
    keystore: Path  # key and certificate chain in one PEM file (Kafka's PEM ssl.keystore.location)
    _key: object
    _cert: object


def _name(text: str) -> x509.Name:
    return x509.Name.from_rfc4514_string(text)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


class Pki:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ca_key, self._ca_cert = self._authority("CN=sparklog test CA,O=sparklog")
        self.ca = _write(self.directory / "ca.pem", self._ca_cert.public_bytes(serialization.Encoding.PEM))
        self.broker = self._issue("broker", "CN=localhost,O=sparklog", self._ca_key, self._ca_cert, hosts=True)
        self.expired = self._issue("expired", "CN=localhost,O=sparklog", self._ca_key, self._ca_cert, hosts=True,
                                   days=(-10, -1))
        other_key, other_cert = self._authority("CN=someone else's CA")
        self.untrusted = self._issue("untrusted", "CN=localhost,O=elsewhere", other_key, other_cert, hosts=True)

    @staticmethod
    def _authority(subject: str):
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(subject))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return key, cert

    def _issue(self, stem: str, subject: str, ca_key, ca_cert, hosts: bool = False, days=(-1, 30)) -> Bundle:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now + days[0] * _DAY).not_valid_after(now + days[1] * _DAY)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(_HOSTS)), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        return Bundle(_write(self.directory / f"{stem}.crt", cert_pem), _write(self.directory / f"{stem}.key", key_pem),
                      _write(self.directory / f"{stem}.keystore.pem", key_pem + cert_pem), key, cert)

    def client(self, subject: str, stem: str | None = None) -> Bundle:
        return self._issue(stem or subject.split(",")[0].split("=")[1], subject, self._ca_key, self._ca_cert)

    def server(self, subject: str, stem: str | None = None) -> Bundle:
        return self._issue(stem or subject.split(",")[1].split("=")[1], subject, self._ca_key, self._ca_cert,
                           hosts=True)

    def pkcs12(self, bundle: Bundle, password: str) -> Path:
        data = pkcs12.serialize_key_and_certificates(b"sparklog", bundle._key, bundle._cert, None,
                                                     serialization.BestAvailableEncryption(password.encode()))
        return _write(bundle.keystore.with_suffix(".p12"), data)

    def broker_ssl(self, **extra: str) -> dict[str, str]:
        """The broker's ssl.* properties for a PEM key store and trust store of this PKI."""
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.broker.keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca), **extra}


def make_pki(directory: Path) -> Pki:
    return Pki(directory)

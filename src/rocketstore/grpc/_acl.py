"""ACL for the gRPC front end: RocketMQ 5.x clients sign every request.

A client with credentials sends, with each call::

    x-mq-date-time: 20240101T120000Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(secret key, value of x-mq-date-time)>

The broker knows the secret key of each access key and recomputes the signature. A request
without the header, with an unknown access key, another algorithm, other signed headers or a
wrong signature is refused (UNAUTHORIZED). The date is not checked against the clock: clients
format their local time with a ``Z`` suffix, so it cannot be compared across time zones.

Credentials come from the broker's configuration: :func:`parse_credentials` reads
``ak:sk[,ak:sk...]`` and :func:`load_credentials` a file of ``ak:sk`` (or ``ak=sk``) lines or a
JSON object ``{"ak": "sk"}``.

Pure functions and an immutable checker; any thread.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..store._errors import StoreConfigError

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_HEADER = "x-mq-date-time"
AUTHORIZATION_HEADER = "authorization"


def sign(secret_key: str, date_time: str) -> str:
    """The signature a client sends: lower-case hex of HMAC-SHA1(secret key, date time)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorization_header(access_key: str, secret_key: str, date_time: str) -> str:
    """The ``authorization`` value a client sends for ``date_time`` (tests, tools)."""
    return (
        f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, "
        f"Signature={sign(secret_key, date_time)}"
    )


def parse_authorization(value: str) -> tuple[str, str, str]:
    """(access key, signed headers, signature) of an ``authorization`` value. ValueError when it
    is not an MQv2-HMAC-SHA1 authorization."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise ValueError(f"unsupported authorization algorithm {algorithm!r}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, eq, field_value = part.strip().partition("=")
        if eq:
            fields[name.strip()] = field_value.strip()
    try:
        credential = fields["Credential"]
        signed = fields["SignedHeaders"]
        signature = fields["Signature"]
    except KeyError as exc:
        raise ValueError(f"authorization lacks {exc.args[0]}") from None
    access_key = credential.split("/", 1)[0]  # some clients scope the credential: ak/...
    if not access_key or not signature:
        raise ValueError("authorization has an empty credential or signature")
    return access_key, signed, signature


class AclChecker:
    """Checks the signature of a request against ``credentials`` (access key → secret key)."""

    def __init__(self, credentials: Mapping[str, str]) -> None:
        self._credentials = dict(credentials)

    def check(self, metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
        """None when the request's metadata is signed by a known access key, else why not."""
        headers: dict[str, str] = {}
        for key, value in metadata:
            if isinstance(value, str):
                headers[key.lower()] = value
        authorization = headers.get(AUTHORIZATION_HEADER)
        if authorization is None:
            return "no authorization header"
        try:
            access_key, signed, signature = parse_authorization(authorization)
        except ValueError as exc:
            return str(exc)
        if signed.strip().lower() != DATE_TIME_HEADER:
            return f"unsupported signed headers {signed!r}"
        secret = self._credentials.get(access_key)
        if secret is None:
            return f"unknown access key {access_key!r}"
        date_time = headers.get(DATE_TIME_HEADER)
        if date_time is None:
            return f"no {DATE_TIME_HEADER} header"
        if not hmac.compare_digest(sign(secret, date_time), signature.lower()):
            return "signature does not match"
        return None


def parse_credentials(text: str) -> dict[str, str]:
    """``ak:sk[,ak:sk...]`` (``;`` or newlines also separate pairs, ``=`` may replace ``:``)."""
    out: dict[str, str] = {}
    for item in text.replace(";", ",").replace("\n", ",").split(","):
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        sep = ":" if ":" in item else "="
        ak, found, sk = item.partition(sep)
        if not found or not ak.strip() or not sk.strip():
            raise StoreConfigError(f"ACL credential {item!r} is not access_key:secret_key")
        out[ak.strip()] = sk.strip()
    return out


def load_credentials(path: str | os.PathLike[str]) -> dict[str, str]:
    """Credentials from a file: a JSON object of access key → secret key, or one ``ak:sk`` pair
    a line (``#`` starts a comment line)."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreConfigError(f"{path}: not JSON: {exc}") from None
        if not isinstance(doc, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in doc.items()
        ):
            raise StoreConfigError(f"{path}: expected an object of access key → secret key")
        return dict(doc)
    return parse_credentials(text)

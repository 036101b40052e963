"""Request signatures of RocketMQ 4.x's plain ACL, as clients send them and brokers check them.

A signing client adds ``AccessKey`` (and the C++ client ``OnsChannel``) to a request's
extFields, then::

    content   = the values of every extField but Signature, in the order of their sorted names,
                concatenated, UTF-8; then the body's bytes
    Signature = Base64(HmacSHA1(key = secret key, content))

and adds ``Signature``. The broker recomputes it from the fields it received (leaving out
``Signature`` and ``_UNIQUE_KEY_QUERY``) with the account's secret key.

Pure functions and an immutable signer; any thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ._command import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # left out of the content the broker checks

# how a refusal of the ACL starts its remark (RocketMQ's AclException, as its clients see it)
ACL_EXCEPTION_PREFIX = "org.apache.rocketmq.acl.common.AclException: "

ACCESS_KEY_ENV = "ROCKETSTORE_ACCESS_KEY"
SECRET_KEY_ENV = "ROCKETSTORE_SECRET_KEY"
# the account a server's own clients sign with (a broker's registrations and controller
# requests, a controller's notices to brokers), when no configuration names one
INNER_ACCESS_KEY_ENV = "ROCKETSTORE_INNER_CLIENT_ACCESS_KEY"
INNER_SECRET_KEY_ENV = "ROCKETSTORE_INNER_CLIENT_SECRET_KEY"
INNER_CREDENTIALS_KEY = "innerClientAuthenticationCredentials"


def field_text(value: Any) -> str:
    """An extField's value as the Java side sees it (every field is a string there)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def signed_content(
    ext_fields: Mapping[str, Any],
    body: bytes | bytearray | memoryview,
    skip: Iterable[str] = (SIGNATURE,),
) -> bytes:
    """What a signature covers: the sorted fields' values (but ``skip``), then the body."""
    left_out = set(skip)
    text = "".join(field_text(ext_fields[k]) for k in sorted(ext_fields) if k not in left_out)
    return text.encode("utf-8") + bytes(body)


def signature(content: bytes, secret_key: str) -> str:
    """Base64 of HmacSHA1(secret key, content)."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


class RequestSigner:
    """Signs requests with one account's keys, as RocketMQ's AclClientRPCHook does (but for
    ``_UNIQUE_KEY_QUERY``, left out as RocketMQ's broker leaves it out): call it on a request
    just before it is sent (its extFields are final)."""

    def __init__(self, access_key: str, secret_key: str) -> None:
        if not access_key or not secret_key:
            raise ValueError("an access key and a secret key are both needed to sign")
        self.access_key = access_key
        self._secret_key = secret_key

    def __call__(self, cmd: RemotingCommand) -> None:
        fields = cmd.ext_fields
        fields.pop(SIGNATURE, None)
        fields[ACCESS_KEY] = self.access_key
        content = signed_content(fields, cmd.body, skip=(SIGNATURE, UNIQUE_KEY_QUERY))
        fields[SIGNATURE] = signature(content, self._secret_key)

    def __repr__(self) -> str:
        return f"RequestSigner(access_key={self.access_key!r})"


def signer_from_env(env: Mapping[str, str] | None = None) -> RequestSigner | None:
    """A signer for ``ROCKETSTORE_ACCESS_KEY`` / ``ROCKETSTORE_SECRET_KEY`` when both are set
    (None when neither is). ValueError when only one is."""
    env = os.environ if env is None else env
    access_key = env.get(ACCESS_KEY_ENV, "")
    secret_key = env.get(SECRET_KEY_ENV, "")
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ValueError(f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither")
    return RequestSigner(access_key, secret_key)


def parse_session_credentials(text: str) -> tuple[str, str]:
    """(access key, secret key) of ``{"accessKey": "...", "secretKey": "..."}`` (RocketMQ 5's
    SessionCredentials JSON, as ``innerClientAuthenticationCredentials`` holds it); ValueError
    naming the key when it is not that."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise ValueError(
            f'{INNER_CREDENTIALS_KEY}: expected {{"accessKey": "...", "secretKey": "..."}}'
        )
    access_key, secret_key = doc.get("accessKey"), doc.get("secretKey")
    if not isinstance(access_key, str) or not isinstance(secret_key, str):
        raise ValueError(f"{INNER_CREDENTIALS_KEY}: accessKey and secretKey must both be text")
    if not access_key or not secret_key:
        raise ValueError(f"{INNER_CREDENTIALS_KEY}: an empty key")
    return access_key, secret_key


def inner_credentials(
    configured: str, env: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """(access key, secret key) a server's own clients sign with: ``configured`` (the
    SessionCredentials JSON) when set, else ROCKETSTORE_INNER_CLIENT_ACCESS_KEY and
    ROCKETSTORE_INNER_CLIENT_SECRET_KEY; None when neither. ValueError when ``configured`` does
    not parse or only one of the two variables is set."""
    if configured:
        return parse_session_credentials(configured)
    env = os.environ if env is None else env
    access_key = env.get(INNER_ACCESS_KEY_ENV, "")
    secret_key = env.get(INNER_SECRET_KEY_ENV, "")
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ValueError(f"set both {INNER_ACCESS_KEY_ENV} and {INNER_SECRET_KEY_ENV}")
    return access_key, secret_key

"""Who may replicate: the HA port's proof of membership (rocketstore's own, on both protocols).

With authentication on (``HAGuard.credentials``: the inner account the brokers of a group share),
three frames come before the protocol's own (a 4.x slave's first report, an AutoSwitch slave's
HANDSHAKE); with it off none of them is sent and the bytes on the wire are RocketMQ's, unchanged
(RocketMQ brokers never see them: they cannot answer, see docs/security.md)::

    master → slave   CHALLENGE  ┌──────────────┬───────────┬─────────┬───────────────────────┐
                                │ magic "RSHA" │ version 1 │ flags 0 │ master nonce (32)     │
                                │ int32        │ int16     │ int16   │ random per connection │
                                └──────────────┴───────────┴─────────┴───────────────────────┘  40
    slave → master   ANSWER     ┌───────┬─────────┬──────────┬───────────┬────────────┐
                                │ magic │ version │ protocol │ broker id │ slave nonce│
                                │ int32 │ int16   │ int16    │ int64     │ (32)       │
                                ├───────┴─────────┴──────────┴───────────┴────────────┤
                                │ name len int16 │ access key len int16 │ name │ key  │
                                ├────────────────┴──────────────────────┴──────┴──────┤
                                │ slave MAC (32)                                      │
                                └─────────────────────────────────────────────────────┘
    master → slave   RESULT     ┌───────┬────────────────────────┬──────────┬─────────┬──────────┐
                                │ magic │ status int16 (0: in)   │ text len │ text    │ master   │
                                │ int32 │ (1: refused)           │ int16    │ (UTF-8) │ MAC (32) │
                                └───────┴────────────────────────┴──────────┴─────────┴──────────┘

``protocol`` is 0 for RocketMQ 4.x's HA, 1 for AutoSwitch; ``name`` the broker group (brokerName),
``broker id`` the replica's own id (its broker.conf brokerId in 4.x, the controller's id in
controller mode; an AutoSwitch HANDSHAKE after it must claim the same id).

The slave MAC is HMAC-SHA256 under the inner account's secret key over a label, both nonces, the
protocol, the id, the name and the access key; the master MAC (0 on a refusal) over another label,
both nonces and the slave MAC. Neither is replayable: the master's nonce is new for every
connection, and so is the slave's, which the master's proof covers (a slave believes a master
only when it answers with the secret too).

What the master accepts, after the MAC: the access key of its inner account, its own group, the
protocol it serves, an id it knows (4.x: any slave id, 1 and up; controller mode: an id in the
controller's replica table or SyncStateSet), and no other connection under that id. Every refusal
goes to ``HAGuard.audit`` (the broker writes it to the audit log) and is answered with its reason
before the connection closes. The proof covers the handshake: without TLS on the HA port
(``_tls``, ``HAGuard.tls``) whoever can take over the connection after it can inject frames
(docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from ._tls import HATls

log = logging.getLogger(__name__)

MAGIC = 0x52534841  # "RSHA"
VERSION = 1
PROTOCOL_4X = 0
PROTOCOL_AUTO_SWITCH = 1
PROTOCOL_NAMES = {PROTOCOL_4X: "4.x HA", PROTOCOL_AUTO_SWITCH: "AutoSwitch HA"}
NONCE_SIZE = 32
MAC_SIZE = 32
MAX_TEXT = 255  # bytes of a name, an access key or a refusal's reason

CHALLENGE = struct.Struct(">ihh32s")  # magic, version, flags, master nonce
ANSWER_HEAD = struct.Struct(">ihhq32shh")  # magic, version, protocol, id, nonce, name/key len
RESULT_HEAD = struct.Struct(">ihh")  # magic, status, text length
CHALLENGE_SIZE = CHALLENGE.size  # 40
ANSWER_HEAD_SIZE = ANSWER_HEAD.size  # 52
RESULT_HEAD_SIZE = RESULT_HEAD.size  # 8
ACCEPTED = 0
REFUSED = 1

_SLAVE_LABEL = b"rocketstore HA slave v1\0"
_MASTER_LABEL = b"rocketstore HA master v1\0"
_MAC_FIELDS = struct.Struct(">hq")  # protocol, broker id


class HandshakeRefused(Exception):
    """A peer's proof did not hold (the message says why)."""


Audit = Callable[[str, str, str, str], None]
"""(source address, access key or "", who it claimed to be, reason): a refused peer."""


def _log_refusal(source: str, account: str, claimed: str, reason: str) -> None:
    log.warning("HA: refused %s (%s, account %s): %s", source, claimed, account or "-", reason)


@dataclass(frozen=True, slots=True)
class HAGuard:
    """Who may replicate from this store, and who this store is to its master.

    ``credentials``: the inner account (access key, secret key) a group's brokers share; None
    turns authentication off (RocketMQ's HA, trusting the peer's word) unless ``closed``: then
    authentication is on and no peer can prove itself (a master with ACL on and no inner
    account). ``group`` and ``broker_id``: this broker's name and (4.x) id, which its slave
    side proves. ``audit``: told of every refused peer. ``tls``: the HA port's TLS (None:
    plain TCP, see ``_tls``). Any thread."""

    credentials: tuple[str, str] | None = field(default=None, repr=False)
    group: str = ""
    broker_id: int = -1
    audit: Audit = _log_refusal
    closed: bool = False
    tls: HATls | None = None

    @property
    def enabled(self) -> bool:
        return self.credentials is not None or self.closed

    def refuse(self, source: str, account: str, claimed: str, reason: str) -> None:
        try:
            self.audit(source, account, claimed, reason)
        except Exception:
            log.exception("HA: auditing a refusal failed")


OPEN = HAGuard()


@dataclass(frozen=True, slots=True)
class Answer:
    """A slave's ANSWER as read (not yet checked)."""

    protocol: int
    broker_id: int
    nonce: bytes
    group: str
    access_key: str
    mac: bytes

    @property
    def claimed(self) -> str:
        name = PROTOCOL_NAMES.get(self.protocol, f"protocol {self.protocol}")
        return f"replica:{self.broker_id} ({name})"


def _text(value: bytes) -> bytes:
    return struct.pack(">h", len(value)) + value


def slave_mac(secret: bytes, challenge: bytes, answer: Answer) -> bytes:
    data = b"".join(
        (
            _SLAVE_LABEL,
            challenge,
            answer.nonce,
            _MAC_FIELDS.pack(answer.protocol, answer.broker_id),
            _text(answer.group.encode()),
            _text(answer.access_key.encode()),
        )
    )
    return hmac.new(secret, data, hashlib.sha256).digest()


def master_mac(secret: bytes, challenge: bytes, nonce: bytes, slave_proof: bytes) -> bytes:
    data = _MASTER_LABEL + challenge + nonce + slave_proof
    return hmac.new(secret, data, hashlib.sha256).digest()


# ---- the master's side ----------------------------------------------------------------------


def new_challenge() -> tuple[bytes, bytes]:
    """(the master's nonce, the CHALLENGE frame)."""
    nonce = secrets.token_bytes(NONCE_SIZE)
    return nonce, CHALLENGE.pack(MAGIC, VERSION, 0, nonce)


def read_answer(buf: bytes) -> tuple[Answer, int] | None:
    """The ANSWER at the start of ``buf`` and its length; None while it is incomplete.
    HandshakeRefused when it is not an ANSWER."""
    if len(buf) < ANSWER_HEAD_SIZE:
        if len(buf) >= 4 and struct.unpack_from(">i", buf)[0] != MAGIC:
            raise HandshakeRefused("no authentication answer (a peer without haAuth?)")
        return None
    magic, version, protocol, broker_id, nonce, name_len, key_len = ANSWER_HEAD.unpack_from(buf)
    if magic != MAGIC:
        raise HandshakeRefused("no authentication answer (a peer without haAuth?)")
    if version != VERSION:
        raise HandshakeRefused(f"authentication version {version}, this master speaks {VERSION}")
    if not 0 <= name_len <= MAX_TEXT or not 0 <= key_len <= MAX_TEXT:
        raise HandshakeRefused("a malformed authentication answer")
    size = ANSWER_HEAD_SIZE + name_len + key_len + MAC_SIZE
    if len(buf) < size:
        return None
    pos = ANSWER_HEAD_SIZE
    try:
        group = buf[pos : pos + name_len].decode()
        access_key = buf[pos + name_len : pos + name_len + key_len].decode()
    except UnicodeDecodeError:
        raise HandshakeRefused("a malformed authentication answer") from None
    mac = bytes(buf[size - MAC_SIZE : size])
    return Answer(protocol, broker_id, bytes(nonce), group, access_key, mac), size


def check_answer(guard: HAGuard, challenge: bytes, answer: Answer, protocol: int) -> None:
    """HandshakeRefused unless ``answer`` proves the inner account's secret for this group and
    protocol (the replica id is the service's to check)."""
    if guard.credentials is None:
        raise HandshakeRefused("this master has no inner account to check a proof against")
    access_key, secret = guard.credentials
    expected = slave_mac(secret.encode(), challenge, answer)
    # the MAC first, compared in constant time: nothing about the account leaks before it
    if not hmac.compare_digest(expected, answer.mac) or answer.access_key != access_key:
        raise HandshakeRefused("the proof does not hold (not the inner account's secret)")
    if answer.protocol != protocol:
        raise HandshakeRefused(
            f"a {PROTOCOL_NAMES.get(answer.protocol, '?')} slave at a "
            f"{PROTOCOL_NAMES[protocol]} master"
        )
    if answer.group != guard.group:
        raise HandshakeRefused(f"a replica of {answer.group!r}, this is {guard.group!r}")


def accepted(guard: HAGuard, challenge: bytes, answer: Answer) -> bytes:
    """The RESULT frame that lets ``answer``'s slave in, with the master's proof."""
    assert guard.credentials is not None
    proof = master_mac(guard.credentials[1].encode(), challenge, answer.nonce, answer.mac)
    return RESULT_HEAD.pack(MAGIC, ACCEPTED, 0) + proof


def refused(reason: str) -> bytes:
    text = reason.encode()[:MAX_TEXT]
    return RESULT_HEAD.pack(MAGIC, REFUSED, len(text)) + text + bytes(MAC_SIZE)


# ---- the slave's side -----------------------------------------------------------------------


def prove(
    guard: HAGuard,
    protocol: int,
    broker_id: int,
    recv_exactly: Callable[[int], bytes],
    send: Callable[[bytes], object],
) -> None:
    """The slave's side of the handshake on a new connection: read the CHALLENGE, ANSWER it,
    check the master's RESULT. HandshakeRefused when the master refuses or cannot prove the
    secret, or this replica has no inner account; OSError when the connection fails
    (``recv_exactly`` / ``send`` raise it)."""
    if guard.credentials is None:
        raise HandshakeRefused("no inner account to prove this replica with")
    access_key, secret = guard.credentials
    head = recv_exactly(CHALLENGE_SIZE)
    magic, version, _flags, challenge = CHALLENGE.unpack(head)
    if magic != MAGIC:
        raise HandshakeRefused("the master sent no challenge (is haAuthEnabled on there?)")
    if version != VERSION:
        raise HandshakeRefused(f"the master speaks authentication version {version}")
    nonce = secrets.token_bytes(NONCE_SIZE)
    group = guard.group.encode()[:MAX_TEXT].decode(errors="ignore")
    answer = Answer(protocol, broker_id, nonce, group, access_key, b"")
    mac = slave_mac(secret.encode(), challenge, answer)
    name, key = answer.group.encode(), access_key.encode()
    send(
        ANSWER_HEAD.pack(MAGIC, VERSION, protocol, broker_id, nonce, len(name), len(key))
        + name
        + key
        + mac
    )
    magic, status, text_len = RESULT_HEAD.unpack(recv_exactly(RESULT_HEAD_SIZE))
    if magic != MAGIC or not 0 <= text_len <= MAX_TEXT:
        raise HandshakeRefused("the master's answer to the proof is malformed")
    text = recv_exactly(text_len).decode(errors="replace") if text_len else ""
    proof = recv_exactly(MAC_SIZE)
    if status != ACCEPTED:
        raise HandshakeRefused(f"the master refused this replica: {text}")
    if not hmac.compare_digest(proof, master_mac(secret.encode(), challenge, nonce, mac)):
        raise HandshakeRefused("the master could not prove the inner account's secret")

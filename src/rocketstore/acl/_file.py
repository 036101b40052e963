"""The ACL file a broker reads, and re-reads when it changes.

Where it is: ``--acl-file PATH``, else ``$ROCKETMQ_HOME/conf/plain_acl.yml`` when broker.conf
says ``aclEnable=true`` (:func:`default_acl_path`).

What it holds: a plain_acl.yml (see ``_plain``), or, for files written for the older
``--grpc-acl`` option, ``access_key:secret_key`` lines or a JSON object of access key →
secret key: accounts with every permission.

:class:`AclFile` looks at the file's modification time and size at most once per
``check_interval_s`` (when asked for the rules), and reads it again when either changed. A
file that cannot be read or parsed at start-up is an AclConfigError; later, the rules read
last stay in force and the problem is logged. Loop thread (or any one thread at a time).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

import yaml

from ._errors import AclConfigError
from ._plain import Account, PlainAcl, admin_accounts, parse_plain_acl

log = logging.getLogger(__name__)


class AclSource(Protocol):
    """Where a server's ACL rules come from: the rules in force now."""

    def current(self) -> PlainAcl: ...


CHECK_INTERVAL_S = 1.0
ROCKETMQ_HOME_ENV = "ROCKETMQ_HOME"
_PLAIN_KEYS = {"accounts", "globalWhiteRemoteAddresses", "dataVersion"}


def default_acl_path(env: Mapping[str, str] | None = None) -> Path:
    """``$ROCKETMQ_HOME/conf/plain_acl.yml`` (the current directory without ROCKETMQ_HOME)."""
    env = os.environ if env is None else env
    return Path(env.get(ROCKETMQ_HOME_ENV) or ".") / "conf" / "plain_acl.yml"


def parse_key_pairs(text: str) -> dict[str, str]:
    """``ak:sk`` pairs (``=`` may replace ``:``), separated by commas, semicolons or lines;
    ``#`` starts a comment. AclConfigError names the first item that is not a pair."""
    out: dict[str, str] = {}
    for line in text.replace(";", "\n").replace(",", "\n").splitlines():
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        sep = ":" if ":" in item else "="
        ak, found, sk = item.partition(sep)
        if not found or not ak.strip() or not sk.strip():
            raise AclConfigError(f"{item!r} is not access_key:secret_key")
        out[ak.strip()] = sk.strip()
    return out


def parse_key_object(text: str) -> dict[str, str]:
    """A JSON object of access key → secret key; AclConfigError when it is not one."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AclConfigError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in doc.items()
    ):
        raise AclConfigError("expected an object of access key → secret key")
    return dict(doc)


def parse_acl_text(text: str, path: Path) -> PlainAcl:
    """The rules of an ACL file's text (a plain_acl.yml or a key list)."""
    stripped = text.lstrip()
    try:
        if stripped.startswith("{"):  # a JSON object of access key → secret key
            return admin_accounts(parse_key_object(text))
    except AclConfigError as exc:
        raise AclConfigError(f"{path}: {exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        doc = exc
    if isinstance(doc, dict) and not doc.keys() & _PLAIN_KEYS:
        if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in doc.values()):
            return admin_accounts({str(k): str(v) for k, v in doc.items()})  # "ak: sk" lines
    if isinstance(doc, dict) or doc is None:
        try:
            return parse_plain_acl(doc)
        except AclConfigError as exc:
            raise AclConfigError(f"{path}: {exc}") from None
    # neither a plain_acl.yml nor JSON: ak:sk lines
    try:
        return admin_accounts(parse_key_pairs(text))
    except AclConfigError as exc:
        raise AclConfigError(f"{path}: {exc}") from None


def load_acl(path: str | os.PathLike[str]) -> PlainAcl:
    """The rules of the file at ``path``; AclConfigError when it cannot be read or used."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"cannot read ACL file {p}: {exc}") from None
    return parse_acl_text(text, p)


class AclFile:
    """The rules of one ACL file, re-read when the file changes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        check_interval_s: float = CHECK_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.check_interval_s = check_interval_s
        self._monotonic = monotonic
        self._stamp = self._stat()
        if self._stamp is None:
            raise AclConfigError(f"ACL file {self.path} does not exist")
        self._acl = load_acl(self.path)
        self._checked = monotonic()
        self.reloads = 0

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def current(self) -> PlainAcl:
        """The rules in force; reads the file again when it has changed since the last look
        (looked at most once per ``check_interval_s``)."""
        now = self._monotonic()
        if now - self._checked >= self.check_interval_s:
            self._checked = now
            self.maybe_reload()
        return self._acl

    def maybe_reload(self) -> bool:
        """Read the file again if it changed; True when new rules are in force."""
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            if stamp is None and self._stamp is not None:
                log.warning("ACL file %s is gone; the rules read last stay in force", self.path)
                self._stamp = None
            return False
        self._stamp = stamp
        try:
            acl = load_acl(self.path)
        except AclConfigError as exc:
            log.error(
                "ACL file %s not reloaded, the rules read last stay in force: %s", self.path, exc
            )
            return False
        self._acl = acl
        self.reloads += 1
        log.info("ACL file %s reloaded: %d accounts", self.path, len(acl.accounts))
        return True


class StaticAcl:
    """Rules that never change (given in code rather than by a file)."""

    def __init__(self, acl: PlainAcl) -> None:
        self._acl = acl

    def current(self) -> PlainAcl:
        return self._acl


class WithAccounts:
    """The rules of ``source`` with ``extra`` accounts added (a server's own account, which
    no file lists). The merged rules are made again only when ``source``'s change."""

    def __init__(self, source: AclSource, extra: Iterable[Account]) -> None:
        self.source = source
        self.extra = tuple(extra)
        self._base: PlainAcl | None = None
        self._merged = PlainAcl()

    def current(self) -> PlainAcl:
        base = self.source.current()
        if base is not self._base:
            self._merged = base.with_accounts(self.extra)
            self._base = base
        return self._merged


INNER_ACCESS_KEY_PREFIX = "rocketstore-inner-"


def process_account() -> Account:
    """A new admin account for the clients of one process to reach its own servers (``serve``:
    its broker registering with its name server): random keys, kept in memory only."""
    return Account(
        access_key=INNER_ACCESS_KEY_PREFIX + secrets.token_hex(8),
        secret_key=secrets.token_urlsafe(32),
        admin=True,
    )

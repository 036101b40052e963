"""Where ACL 2.0's users and ACLs are kept: one JSON file in the broker's config directory,
``<storePathRootDir>/config/auth.json``::

    {"version": 1,
     "users": [{"username": "admin", "password": "...", "userType": "Super",
                "userStatus": "enable"}, ...],
     "acls":  [{"subject": "User:alice", "policies": [...]}, ...]}

(users as ``UserInfo``, ACLs as ``AclInfo``: see ``_auth_model``). Each change writes the
whole file to ``auth.json.tmp``, fsyncs it, renames it over ``auth.json`` and fsyncs the
directory: a crash at any moment leaves the old file or the new one, never a mix; a
``.tmp`` left behind is not read. A file that cannot be read at start-up is an
AclConfigError (nothing is overwritten).

:class:`AuthStore` serves the changes of the admin requests (createUser ... deleteAcl, with
RocketMQ 5.3's checks and wording: AuthMetadataError) and, as an ACL source, the rules in
force (``current``). A lock serialises changes; ``current`` is a snapshot, any thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from ..store._durable import fsync_dir, replace_synced
from ._auth_eval import AuthRules, AuthSettings
from ._auth_model import (
    CUSTOM,
    DEFAULT,
    SUPER,
    USER_PREFIX,
    Acl,
    Resource,
    User,
    UserChange,
    _named,
    subject_key,
    user_from_json,
)
from ._errors import AclConfigError, AuthMetadataError

log = logging.getLogger(__name__)

FILE_NAME = "auth.json"
VERSION = 1


def read_auth_file(path: Path) -> tuple[dict[str, User], dict[str, Acl]]:
    """The users and ACLs of ``path`` (none when it does not exist); AclConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"cannot read {path}: {exc}") from None
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise AuthMetadataError("expected an object with users and acls")
        users = {u.username: u for u in (user_from_json(d) for d in doc.get("users") or [])}
        acls = {a.subject: a for a in (Acl.from_json(d) for d in doc.get("acls") or [])}
    except (ValueError, AuthMetadataError) as exc:
        raise AclConfigError(f"{path} is not an ACL 2.0 file: {exc}") from None
    return users, acls


class AuthStore:
    """The users and ACLs of one broker, kept in ``config_dir/auth.json``."""

    def __init__(self, config_dir: str | Path, settings: AuthSettings | None = None) -> None:
        self.dir = Path(config_dir)
        self.path = self.dir / FILE_NAME
        self.settings = settings if settings is not None else AuthSettings()
        self._lock = threading.Lock()
        self._users, self._acls = read_auth_file(self.path)
        self._rules = self._snapshot()

    # ---- the rules in force ------------------------------------------------------------------

    def _snapshot(self) -> AuthRules:
        return AuthRules(users=self._users, acls=self._acls, settings=self.settings)

    def current(self) -> AuthRules:
        return self._rules

    def _commit(self, users: dict[str, User], acls: dict[str, Acl]) -> None:
        """Write the new state durably, then put it in force. Lock held."""
        doc = {
            "version": VERSION,
            "users": [u.to_json() for u in users.values()],
            "acls": [a.to_json() for a in acls.values()],
        }
        data = json.dumps(doc, indent=2, ensure_ascii=False).encode("utf-8")
        self.dir.mkdir(parents=True, exist_ok=True)
        replace_synced(self.path, data)
        fsync_dir(self.dir)
        self._users, self._acls = users, acls
        self._rules = self._snapshot()

    # ---- users -------------------------------------------------------------------------------

    def ensure_users(self, users: Iterable[User]) -> list[str]:
        """Create each user that does not exist yet (``initAuthenticationUser``, the inner
        account); the names created."""
        users = list(users)
        with self._lock:
            new = dict(self._users)
            made = [u.username for u in users if u.username not in new]
            for u in users:
                new.setdefault(u.username, u)
            if made:
                self._commit(new, dict(self._acls))
            return made

    def create_user(self, change: UserChange) -> User:
        user = change.created()
        with self._lock:
            if user.username in self._users:
                raise AuthMetadataError("The user is existed")
            users = dict(self._users)
            users[user.username] = user
            self._commit(users, dict(self._acls))
        return user

    def update_user(self, change: UserChange) -> User:
        if not change.username.strip():
            raise AuthMetadataError("username can not be blank")
        with self._lock:
            old = self._users.get(change.username)
            if old is None:
                raise AuthMetadataError("The user is not exist")
            user = change.applied_to(old)
            users = dict(self._users)
            users[user.username] = user
            self._commit(users, dict(self._acls))
        return user

    def delete_user(self, username: str) -> bool:
        """Remove the user and its ACL; False when there was no such user."""
        if not username.strip():
            raise AuthMetadataError("username can not be blank")
        with self._lock:
            if username not in self._users:
                return False
            users = dict(self._users)
            del users[username]
            acls = dict(self._acls)
            acls.pop(USER_PREFIX + username, None)
            self._commit(users, acls)
        return True

    def get_user(self, username: str) -> User | None:
        if not username.strip():
            raise AuthMetadataError("username can not be blank")
        return self._users.get(username)

    def list_users(self, name_filter: str | None = None) -> list[User]:
        """The users whose name holds ``name_filter``, by name (UTF-8 bytes, as RocketMQ 5.3's
        store iterates its keys)."""
        users = sorted(self._users.values(), key=lambda u: u.username.encode())
        return [u for u in users if not name_filter or name_filter in u.username]

    def is_super(self, username: str) -> bool:
        user = self._users.get(username)
        return user is not None and user.user_type == SUPER

    # ---- ACLs --------------------------------------------------------------------------------

    def _subject_user(self, subject: str) -> None:
        if subject[len(USER_PREFIX) :] not in self._users:
            raise AuthMetadataError(f"The subject of {subject} is not exist.")

    def put_acl(self, acl: Acl) -> Acl:
        """Create or update (both merge entry by entry into what the subject has)."""
        with self._lock:
            self._subject_user(acl.subject)
            old = self._acls.get(acl.subject)
            new = acl if old is None else old.updated(acl.policies)
            acls = dict(self._acls)
            acls[acl.subject] = new
            self._commit(dict(self._users), acls)
        return new

    def delete_acl(
        self, subject: str, policy_type: str | None = None, resource: str | None = None
    ) -> None:
        """Remove the subject's ACL, or with ``resource`` that entry of its policy
        (``policy_type``, Custom when none); the ACL goes when its last entry does."""
        key = subject_key(subject)
        target = Resource.parse(resource) if resource else None
        kind = _named(policy_type, (CUSTOM, DEFAULT), "policyType") if policy_type else CUSTOM
        with self._lock:
            self._subject_user(key)
            old = self._acls.get(key)
            if old is None:
                raise AuthMetadataError("The acl is not exist.")
            acls = dict(self._acls)
            if target is None:
                del acls[key]
            else:
                new = old.without(kind, target)
                if new.policies:
                    acls[key] = new
                else:
                    del acls[key]
            self._commit(dict(self._users), acls)

    def get_acl(self, subject: str) -> Acl | None:
        key = subject_key(subject)
        self._subject_user(key)
        return self._acls.get(key)

    def list_acls(
        self, subject_filter: str | None = None, resource_filter: str | None = None
    ) -> list[Acl]:
        """The ACLs by subject (UTF-8 bytes, as ``list_users``), with ``resource_filter`` the
        entries naming it (all of them where the subject itself holds it)."""
        out = []
        for subject, acl in sorted(self._acls.items(), key=lambda item: item[0].encode()):
            if subject_filter and subject_filter not in subject:
                continue
            if resource_filter and resource_filter not in subject:
                acl = acl.filtered(resource_filter)
            if acl.policies:
                out.append(acl)
        return out

"""ACL 2.0's user and ACL admin requests (RocketMQ 5.3's, behind mqadmin's ``createUser`` ...
``listAcl``; ``copyUser`` and ``copyAcl`` are mqadmin's own compositions of these).

=====  =================  ===================================================================
code   request            ext fields, body → answer
=====  =================  ===================================================================
3001   AUTH_CREATE_USER   username, body UserInfo → SUCCESS
3002   AUTH_UPDATE_USER   username, body UserInfo (what it names changes) → SUCCESS
3003   AUTH_DELETE_USER   username → SUCCESS (also when there was none); its ACL goes too
3004   AUTH_GET_USER      username → SUCCESS, body UserInfo (none: no such user)
3005   AUTH_LIST_USER     filter (part of a name) → SUCCESS, body [UserInfo] (none: empty)
3006   AUTH_CREATE_ACL    subject, body AclInfo → SUCCESS (merged into the subject's ACL)
3007   AUTH_UPDATE_ACL    subject, body AclInfo → SUCCESS (the same merge)
3008   AUTH_DELETE_ACL    subject, policyType, resource → SUCCESS: that entry, or without a
                          resource the whole ACL
3009   AUTH_GET_ACL       subject → SUCCESS, body AclInfo (none: the subject has no ACL)
3010   AUTH_LIST_ACL      subjectFilter, resourceFilter → SUCCESS, body [AclInfo]
=====  =================  ===================================================================

A blank username is INVALID_PARAMETER; a user or ACL that cannot be stored or changed
(``AuthMetadataError``: an existing user, a missing subject, a bad resource, action,
decision or source address) NO_PERMISSION with RocketMQ's wording; a Super user made,
changed or removed by a request not signed by a Super user SYSTEM_ERROR / NO_PERMISSION as
RocketMQ answers. With ACL 2.0 on these requests need Cluster Update (a change) or Get (a
read), as RocketMQ 5.3's (``acl._table``); with the plain ACL an admin account. The
users and ACLs are the broker's ``AuthStore`` (``config/auth.json``); the handlers run in a
worker thread (a change fsyncs the file; the store serialises changes).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

from ...acl._auth_model import Acl, UserChange
from ...acl._errors import AuthMetadataError
from ...remoting import Connection, RemotingCommand, ResponseCode
from ...remoting._command import str_value
from ...remoting._fastjson import loads
from ...remoting._signing import ACCESS_KEY
from .._services import HasAuth

log = logging.getLogger(__name__)

RC = ResponseCode
INVALID_PARAMETER = RC.INVALID_PARAMETER

AUTH_CREATE_USER = 3001
AUTH_UPDATE_USER = 3002
AUTH_DELETE_USER = 3003
AUTH_GET_USER = 3004
AUTH_LIST_USER = 3005
AUTH_CREATE_ACL = 3006
AUTH_UPDATE_ACL = 3007
AUTH_DELETE_ACL = 3008
AUTH_GET_ACL = 3009
AUTH_LIST_ACL = 3010


class AuthAdminContext(HasAuth, Protocol):
    """What the user and ACL admin requests use of the broker."""


def _field(cmd: RemotingCommand, name: str) -> str:
    return str_value(cmd.ext_fields.get(name)) or ""


def _body(cmd: RemotingCommand) -> Any:
    if not cmd.body:
        return None
    try:
        return loads(bytes(cmd.body))
    except (ValueError, RecursionError):
        raise AuthMetadataError("The body is not JSON.") from None


def _ok(body: Any = None) -> RemotingCommand:
    r = RemotingCommand.response(RC.SUCCESS)
    if body is not None:
        r.body = json.dumps(body, ensure_ascii=False).encode("utf-8")
    return r


def _refused(exc: AuthMetadataError) -> RemotingCommand:
    return RemotingCommand.response(RC.NO_PERMISSION, str(exc))


class AuthAdminProcessor:
    """Serves the user and ACL admin requests over the broker's ``auth`` store."""

    def __init__(self, broker: AuthAdminContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            AUTH_CREATE_USER: self._guarded(self.create_user),
            AUTH_UPDATE_USER: self._guarded(self.update_user),
            AUTH_DELETE_USER: self._guarded(self.delete_user),
            AUTH_GET_USER: self._guarded(self.get_user),
            AUTH_LIST_USER: self._guarded(self.list_user),
            AUTH_CREATE_ACL: self._guarded(self.put_acl),
            AUTH_UPDATE_ACL: self._guarded(self.put_acl),
            AUTH_DELETE_ACL: self._guarded(self.delete_acl),
            AUTH_GET_ACL: self._guarded(self.get_acl),
            AUTH_LIST_ACL: self._guarded(self.list_acl),
        }

    @staticmethod
    def _guarded(handler: Any) -> Any:
        """The handler run in a worker thread (a change fsyncs the file), its refusals
        answered."""

        async def call(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
            try:
                result: RemotingCommand = await asyncio.to_thread(handler, cmd)
            except AuthMetadataError as exc:
                return _refused(exc)
            return result

        return call

    def _not_super(self, cmd: RemotingCommand) -> bool:
        """Whether the request was signed by someone other than a Super user (unsigned: ACL
        is off, as RocketMQ reads it)."""
        access_key = _field(cmd, ACCESS_KEY)
        return bool(access_key) and not self.broker.auth.is_super(access_key)

    # ---- users -------------------------------------------------------------------------------

    def create_user(self, cmd: RemotingCommand) -> RemotingCommand:
        username = _field(cmd, "username")
        if not username:
            return RemotingCommand.response(INVALID_PARAMETER, "The username is blank")
        change = UserChange.from_json(_body(cmd), username)
        if change.user_type == "Super" and self._not_super(cmd):
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, "The super user can only be create by super user"
            )
        self.broker.auth.create_user(change)
        return _ok()

    def update_user(self, cmd: RemotingCommand) -> RemotingCommand:
        username = _field(cmd, "username")
        if not username:
            return RemotingCommand.response(INVALID_PARAMETER, "The username is blank")
        change = UserChange.from_json(_body(cmd), username)
        if change.user_type == "Super" and self._not_super(cmd):
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, "The super user can only be update by super user"
            )
        auth = self.broker.auth
        old = auth.get_user(username)
        if old is None:
            raise AuthMetadataError("The user is not exist")
        if old.is_super and self._not_super(cmd):
            raise AuthMetadataError("The super user can only be update by super user")
        auth.update_user(change)
        return _ok()

    def delete_user(self, cmd: RemotingCommand) -> RemotingCommand:
        username = _field(cmd, "username")
        auth = self.broker.auth
        old = auth.get_user(username)
        if old is None:
            return _ok()
        if old.is_super and self._not_super(cmd):
            raise AuthMetadataError("The super user can only be update by super user")
        auth.delete_user(username)
        return _ok()

    def get_user(self, cmd: RemotingCommand) -> RemotingCommand:
        username = _field(cmd, "username")
        if not username.strip():
            return RemotingCommand.response(INVALID_PARAMETER, "The username is blank")
        user = self.broker.auth.get_user(username)
        return _ok(None if user is None else user.to_json())

    def list_user(self, cmd: RemotingCommand) -> RemotingCommand:
        users = self.broker.auth.list_users(_field(cmd, "filter") or None)
        return _ok([u.to_json() for u in users] if users else None)

    # ---- ACLs --------------------------------------------------------------------------------

    def put_acl(self, cmd: RemotingCommand) -> RemotingCommand:
        acl = Acl.from_json(_body(cmd), _field(cmd, "subject") or None)
        self.broker.auth.put_acl(acl)
        return _ok()

    def delete_acl(self, cmd: RemotingCommand) -> RemotingCommand:
        self.broker.auth.delete_acl(
            _field(cmd, "subject"),
            _field(cmd, "policyType") or None,
            _field(cmd, "resource") or None,
        )
        return _ok()

    def get_acl(self, cmd: RemotingCommand) -> RemotingCommand:
        acl = self.broker.auth.get_acl(_field(cmd, "subject"))
        return _ok(None if acl is None else acl.to_json())

    def list_acl(self, cmd: RemotingCommand) -> RemotingCommand:
        acls = self.broker.auth.list_acls(
            _field(cmd, "subjectFilter") or None, _field(cmd, "resourceFilter") or None
        )
        return _ok([a.to_json() for a in acls] if acls else None)

"""ACL 2.0's users and ACLs on brokers, as RocketMQ 5.3's DefaultMQAdminExt changes them for
mqadmin's ``createUser`` ... ``listAcl``, ``copyUser`` and ``copyAcl`` (the copies read from
one broker and create, or update, on another).

Users and ACLs travel as RocketMQ's JSON bodies (``UserInfo``, ``AclInfo``): plain dicts
here, checked by ``rocketstore.acl._auth_model`` before they are sent (a bad resource,
action, decision or address is an AuthMetadataError and nothing is sent). A refusal is a
ClientError with the broker's code and remark. Any thread (calls are serialised by the
admin client's RemotingClient).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..acl._auth_model import Acl, UserChange, subject_key
from ..remoting import RemotingCommand, RequestCode, ResponseCode, _fastjson
from ._admin import AdminClient
from ._route import ClientError

RC = RequestCode


def acl_info(
    subject: str,
    resources: Iterable[str],
    actions: Iterable[str],
    source_ips: Iterable[str] = (),
    decision: str = "Allow",
    policy_type: str | None = None,
) -> dict[str, Any]:
    """An ``AclInfo`` of one policy with an entry per resource (mqadmin createAcl's body),
    checked and in RocketMQ's spelling."""
    entries = [
        {
            "resource": r,
            "actions": list(actions),
            "sourceIps": list(source_ips),
            "decision": decision,
        }
        for r in resources
    ]
    policy: dict[str, Any] = {"entries": entries}
    if policy_type:
        policy["policyType"] = policy_type
    doc = {"subject": subject_key(subject), "policies": [policy]}
    return Acl.from_json(doc).to_json()


class AuthAdmin:
    """The user and ACL admin requests through ``admin``'s client (its signer signs them)."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin

    def _call(self, addr: str, code: int, ext: dict[str, str], body: Any = None) -> RemotingCommand:
        payload = b"" if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        cmd = RemotingCommand.request(code, {k: v for k, v in ext.items() if v}, payload)
        r = self.admin.client.invoke(addr, cmd)
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(r.code, r.remark)
        return r

    @staticmethod
    def _doc(r: RemotingCommand) -> Any:
        return _fastjson.loads(bytes(r.body)) if r.body else None

    # ---- users -------------------------------------------------------------------------------

    def create_user(
        self,
        addr: str,
        username: str,
        password: str,
        user_type: str | None = None,
        user_status: str | None = None,
    ) -> None:
        change = UserChange.from_json(
            {"password": password, "userType": user_type, "userStatus": user_status}, username
        )
        user = change.created()
        body = {"username": user.username, "password": user.password}
        if user_type:
            body["userType"] = user.user_type
        if user_status:
            body["userStatus"] = user.user_status
        self._call(addr, RC.AUTH_CREATE_USER, {"username": username}, body)

    def update_user(
        self,
        addr: str,
        username: str,
        password: str | None = None,
        user_type: str | None = None,
        user_status: str | None = None,
    ) -> None:
        change = UserChange.from_json(
            {"password": password, "userType": user_type, "userStatus": user_status}, username
        )
        body: dict[str, str] = {"username": username}
        for key, value in (
            ("password", change.password),
            ("userType", change.user_type),
            ("userStatus", change.user_status),
        ):
            if value:
                body[key] = value
        self._call(addr, RC.AUTH_UPDATE_USER, {"username": username}, body)

    def delete_user(self, addr: str, username: str) -> None:
        self._call(addr, RC.AUTH_DELETE_USER, {"username": username})

    def get_user(self, addr: str, username: str) -> dict[str, Any] | None:
        doc = self._doc(self._call(addr, RC.AUTH_GET_USER, {"username": username}))
        return dict(doc) if isinstance(doc, dict) else None

    def list_users(self, addr: str, name_filter: str | None = None) -> list[dict[str, Any]]:
        doc = self._doc(self._call(addr, RC.AUTH_LIST_USER, {"filter": name_filter or ""}))
        return [dict(d) for d in doc] if isinstance(doc, list) else []

    def copy_users(
        self, from_addr: str, to_addr: str, usernames: Iterable[str] | None = None
    ) -> list[str]:
        """mqadmin copyUser: each user (every one when ``usernames`` is None) of ``from_addr``
        created on ``to_addr``, or updated there when it exists; the names copied."""
        if usernames is None:
            users = self.list_users(from_addr)
        else:
            users = [u for u in (self.get_user(from_addr, n) for n in usernames) if u]
        copied = []
        for u in users:
            name = str(u.get("username", ""))
            ext = {"username": name}
            code = RC.AUTH_UPDATE_USER if self.get_user(to_addr, name) else RC.AUTH_CREATE_USER
            self._call(to_addr, code, ext, u)
            copied.append(name)
        return copied

    # ---- ACLs --------------------------------------------------------------------------------

    def create_acl(self, addr: str, info: dict[str, Any]) -> None:
        self._call(addr, RC.AUTH_CREATE_ACL, {"subject": info["subject"]}, info)

    def update_acl(self, addr: str, info: dict[str, Any]) -> None:
        self._call(addr, RC.AUTH_UPDATE_ACL, {"subject": info["subject"]}, info)

    def delete_acl(
        self, addr: str, subject: str, resource: str | None = None, policy_type: str | None = None
    ) -> None:
        ext = {"subject": subject_key(subject), "resource": resource or ""}
        ext["policyType"] = policy_type or ""
        self._call(addr, RC.AUTH_DELETE_ACL, ext)

    def get_acl(self, addr: str, subject: str) -> dict[str, Any] | None:
        doc = self._doc(self._call(addr, RC.AUTH_GET_ACL, {"subject": subject_key(subject)}))
        return dict(doc) if isinstance(doc, dict) else None

    def list_acls(
        self, addr: str, subject_filter: str | None = None, resource_filter: str | None = None
    ) -> list[dict[str, Any]]:
        ext = {"subjectFilter": subject_filter or "", "resourceFilter": resource_filter or ""}
        doc = self._doc(self._call(addr, RC.AUTH_LIST_ACL, ext))
        return [dict(d) for d in doc] if isinstance(doc, list) else []

    def copy_acls(
        self, from_addr: str, to_addr: str, subjects: Iterable[str] | None = None
    ) -> list[str]:
        """mqadmin copyAcl: each subject's ACL (every one when ``subjects`` is None) of
        ``from_addr`` created on ``to_addr``, or updated there when it has one; the subjects
        copied."""
        if subjects is None:
            acls = self.list_acls(from_addr)
        else:
            acls = [a for a in (self.get_acl(from_addr, s) for s in subjects) if a]
        copied = []
        for a in acls:
            subject = str(a.get("subject", ""))
            try:
                exists = self.get_acl(to_addr, subject) is not None
            except ClientError:  # no such user there: the create names why
                exists = False
            (self.update_acl if exists else self.create_acl)(to_addr, a)
            copied.append(subject)
        return copied

"""ACL 2.0's commands (mqadmin's user and ACL commands): ``user create|update|delete|get|list|
copy`` and ``acl create|update|delete|get|list|copy``, on one broker (``--broker``) or on a
cluster (``--cluster``, every cluster when neither is given): a change on each of its brokers,
masters and slaves (each keeps its own users and ACLs), a read on each master, as mqadmin does. The requests are
signed with ``--access-key`` / ``--secret-key`` (with ACL 2.0 on, a Super user's or one whose
ACL allows the cluster's Update, or Get for a read).

A user or ACL the broker would refuse (a blank password, an unknown action, a bad address) is
refused before anything is sent; a refused request ends the command with status 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from ._common import namesrv_option
from ._errors import ClientGroup

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")
cluster_option = click.option(
    "--cluster",
    "-c",
    default=None,
    help="this cluster's brokers (changes: masters and slaves; reads: masters; default: every "
    "cluster's)",
)
broker_option = click.option("--broker", "-b", default=None, help="this broker HOST:PORT only")


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


@contextmanager
def _auth(
    namesrv: str, cluster: str | None, broker: str | None, *, change: bool = False
) -> Iterator[tuple[Any, list[str]]]:
    """(the AuthAdmin, the brokers to act on: the one given, else the cluster's masters, and
    for a ``change`` its slaves too, as mqadmin picks them); bad input as a usage error."""
    from ..acl._errors import AuthMetadataError
    from ..client._admin import AdminClient
    from ..client._auth_admin import AuthAdmin

    if cluster and broker:
        raise click.UsageError("give --cluster or --broker, not both")
    with AdminClient(namesrv if not broker else "") as admin:
        if broker:
            targets = [broker]
        elif change:
            targets = sorted({b.address for b in admin.brokers(cluster)})
        else:
            targets = sorted(admin.masters(cluster).values())
        if not targets:
            raise click.ClickException("no master broker found")
        try:
            yield AuthAdmin(admin), targets
        except AuthMetadataError as exc:
            raise click.UsageError(str(exc)) from None


def _where(f: F) -> F:
    return namesrv_option(cluster_option(broker_option(f)))


def _dump(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


# ---- users ---------------------------------------------------------------------------------------


@click.group("user", cls=ClientGroup)
def user_group() -> None:
    """ACL 2.0's users on brokers (mqadmin createUser ... listUser, copyUser)."""


username_option = click.option("--username", "-u", required=True, help="the user's name")
user_type_option = click.option(
    "--user-type", "-t", default=None, help="Super (passes every check) or Normal"
)


@user_group.command("create")
@_where
@username_option
@click.option("--password", "-p", required=True, help="the user's password (its secret key)")
@user_type_option
def user_create(
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    username: str,
    password: str,
    user_type: str | None,
) -> None:
    """Create a user (Normal unless --user-type Super)."""
    with _auth(namesrv, cluster, broker, change=True) as (auth, targets):
        for addr in targets:
            auth.create_user(addr, username, password, user_type)
            click.echo(f"create user to {addr} success.")


@user_group.command("update")
@_where
@username_option
@click.option("--password", "-p", default=None, help="a new password")
@user_type_option
@click.option("--user-status", "-s", default=None, help="enable or disable")
def user_update(
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    username: str,
    password: str | None,
    user_type: str | None,
    user_status: str | None,
) -> None:
    """Change what is given of a user (its password, type or status)."""
    with _auth(namesrv, cluster, broker, change=True) as (auth, targets):
        for addr in targets:
            auth.update_user(addr, username, password, user_type, user_status)
            click.echo(f"update user to {addr} success.")


@user_group.command("delete")
@_where
@username_option
def user_delete(namesrv: str, cluster: str | None, broker: str | None, username: str) -> None:
    """Delete a user and its ACL."""
    with _auth(namesrv, cluster, broker, change=True) as (auth, targets):
        for addr in targets:
            auth.delete_user(addr, username)
            click.echo(f"delete user to {addr} success.")


def _user_rows(users: dict[str, list[dict[str, Any]]], as_json: bool) -> None:
    if as_json:
        _dump(users)
        return
    click.echo(f"{'#broker':<24}{'#username':<24}{'#userType':<12}{'#userStatus':<12}")
    for addr, docs in users.items():
        for u in docs:
            click.echo(
                f"{addr:<24}{u.get('username', ''):<24}{u.get('userType') or '':<12}"
                f"{u.get('userStatus') or '':<12}"
            )


@user_group.command("get")
@_where
@username_option
@json_option
def user_get(
    namesrv: str, cluster: str | None, broker: str | None, username: str, as_json: bool
) -> None:
    """A user on each broker (the password is not shown in the table)."""
    with _auth(namesrv, cluster, broker) as (auth, targets):
        found = {addr: [u] for addr in targets if (u := auth.get_user(addr, username))}
    _user_rows(found, as_json)


@user_group.command("list")
@_where
@click.option("--filter", "-f", "name_filter", default=None, help="names containing this")
@json_option
def user_list(
    namesrv: str, cluster: str | None, broker: str | None, name_filter: str | None, as_json: bool
) -> None:
    """The users on each broker."""
    with _auth(namesrv, cluster, broker) as (auth, targets):
        found = {addr: auth.list_users(addr, name_filter) for addr in targets}
    _user_rows(found, as_json)


@user_group.command("copy")
@namesrv_option
@click.option("--from", "-f", "from_broker", required=True, help="the broker to copy from")
@click.option("--to", "-t", "to_broker", required=True, help="the broker to copy to")
@click.option("--usernames", "-u", default=None, help="NAME[,NAME...] (default: every user)")
def user_copy(namesrv: str, from_broker: str, to_broker: str, usernames: str | None) -> None:
    """Copy users from one broker to another (created there, or updated when they exist)."""
    with _auth(namesrv, None, from_broker) as (auth, _):
        names = auth.copy_users(from_broker, to_broker, _split(usernames) or None)
    for name in names:
        click.echo(f"copy user of {name} from {from_broker} to {to_broker} success.")


# ---- ACLs ----------------------------------------------------------------------------------------


@click.group("acl", cls=ClientGroup)
def acl_group() -> None:
    """ACL 2.0's policies on brokers (mqadmin createAcl ... listAcl, copyAcl)."""


subject_option = click.option("--subject", "-s", required=True, help="User:NAME")


def _entry_options(f: F) -> F:
    f = click.option("--decision", "-d", default="Allow", show_default=True, help="Allow or Deny")(
        f
    )
    f = click.option(
        "--source-ip", "-i", default=None, help="ADDRESS-OR-CIDR[,...]: only from these"
    )(f)
    f = click.option(
        "--actions",
        "-a",
        required=True,
        help="ACTION[,ACTION...]: Pub, Sub, Create, Update, Delete, Get, List, All",
    )(f)
    return click.option(
        "--resources",
        "-r",
        required=True,
        help="RESOURCE[,RESOURCE...]: Cluster:C, Namespace:N, Topic:T, Group:G, a name "
        "ending in * (a prefix), Type:* or *",
    )(f)


def _put_acl(
    update: bool,
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    subject: str,
    resources: str,
    actions: str,
    source_ip: str | None,
    decision: str,
) -> None:
    from ..client._auth_admin import acl_info

    with _auth(namesrv, cluster, broker, change=True) as (auth, targets):
        info = acl_info(subject, _split(resources), _split(actions), _split(source_ip), decision)
        for addr in targets:
            (auth.update_acl if update else auth.create_acl)(addr, info)
            click.echo(f"{'update' if update else 'create'} acl to {addr} success.")


@acl_group.command("create")
@_where
@subject_option
@_entry_options
def acl_create(**options: Any) -> None:
    """Grant (or deny) actions on resources to a user (merged into its ACL)."""
    _put_acl(False, **options)


@acl_group.command("update")
@_where
@subject_option
@_entry_options
def acl_update(**options: Any) -> None:
    """Change a user's entries for these resources (merged into its ACL)."""
    _put_acl(True, **options)


@acl_group.command("delete")
@_where
@subject_option
@click.option("--resources", "-r", default=None, help="RESOURCE[,...] (default: the whole ACL)")
@click.option("--policy-type", default=None, help="Custom (default) or Default")
def acl_delete(
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    subject: str,
    resources: str | None,
    policy_type: str | None,
) -> None:
    """Remove a user's entries for resources, or its whole ACL."""
    with _auth(namesrv, cluster, broker, change=True) as (auth, targets):
        for addr in targets:
            targets_of: list[str | None] = list(_split(resources)) or [None]
            for resource in targets_of:
                auth.delete_acl(addr, subject, resource, policy_type)
            click.echo(f"delete acl to {addr} success.")


def _acl_rows(acls: dict[str, list[dict[str, Any]]], as_json: bool) -> None:
    if as_json:
        _dump(acls)
        return
    click.echo(
        f"{'#broker':<22}{'#subject':<20}{'#policyType':<12}{'#resource':<22}"
        f"{'#actions':<18}{'#sourceIps':<20}{'#decision'}"
    )
    for addr, docs in acls.items():
        for a in docs:
            for p in a.get("policies") or []:
                for e in p.get("entries") or []:
                    click.echo(
                        f"{addr:<22}{a.get('subject', ''):<20}{p.get('policyType') or '':<12}"
                        f"{e.get('resource', ''):<22}{','.join(e.get('actions') or []):<18}"
                        f"{','.join(e.get('sourceIps') or []):<20}{e.get('decision', '')}"
                    )


@acl_group.command("get")
@_where
@subject_option
@json_option
def acl_get(
    namesrv: str, cluster: str | None, broker: str | None, subject: str, as_json: bool
) -> None:
    """A user's ACL on each broker."""
    with _auth(namesrv, cluster, broker) as (auth, targets):
        found = {addr: [a] for addr in targets if (a := auth.get_acl(addr, subject))}
    _acl_rows(found, as_json)


@acl_group.command("list")
@_where
@click.option("--subject", "-s", "subject_filter", default=None, help="subjects containing this")
@click.option(
    "--resource", "-r", "resource_filter", default=None, help="entries whose resource contains this"
)
@json_option
def acl_list(
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    subject_filter: str | None,
    resource_filter: str | None,
    as_json: bool,
) -> None:
    """The ACLs on each broker."""
    with _auth(namesrv, cluster, broker) as (auth, targets):
        found = {addr: auth.list_acls(addr, subject_filter, resource_filter) for addr in targets}
    _acl_rows(found, as_json)


@acl_group.command("copy")
@namesrv_option
@click.option("--from", "-f", "from_broker", required=True, help="the broker to copy from")
@click.option("--to", "-t", "to_broker", required=True, help="the broker to copy to")
@click.option("--subjects", "-s", default=None, help="User:NAME[,...] (default: every ACL)")
def acl_copy(namesrv: str, from_broker: str, to_broker: str, subjects: str | None) -> None:
    """Copy ACLs from one broker to another (created there, or merged into what is there)."""
    with _auth(namesrv, None, from_broker) as (auth, _):
        copied = auth.copy_acls(from_broker, to_broker, _split(subjects) or None)
    for subject in copied:
        click.echo(f"copy acl of {subject} from {from_broker} to {to_broker} success.")


COMMANDS = [user_group, acl_group]

"""ACL 2.0's model and decisions (rocketstore.acl._auth_model, _auth_eval): resource patterns
and their order, Deny among equals, actions, source addresses, Super / unknown / disabled
users, Custom before Default, no match refused; authentication by the user's password."""

from __future__ import annotations

from typing import Any

import pytest

from rocketstore.acl._auth_eval import AuthRules, AuthSettings, Principal, best_entry, decide
from rocketstore.acl._auth_model import Acl, PolicyEntry, Resource, User, UserChange
from rocketstore.acl._errors import AccessDeniedError, AuthMetadataError, PermissionDeniedError
from rocketstore.acl._plain import PUB, SUB

ON = AuthSettings(authentication_enabled=True, authorization_enabled=True, cluster_name="C1")


def acl(*entries: dict[str, Any], default: list[dict[str, Any]] | None = None) -> Acl:
    policies: list[dict[str, Any]] = [{"policyType": "Custom", "entries": list(entries)}]
    if default:
        policies.append({"policyType": "Default", "entries": default})
    return Acl.from_json({"subject": "User:alice", "policies": policies})


def entry(resource: str, actions: str, decision: str = "Allow", ips: tuple[str, ...] = ()) -> Any:
    return {
        "resource": resource,
        "actions": actions.split(","),
        "sourceIps": list(ips),
        "decision": decision,
    }


def topic(name: str) -> Resource:
    return Resource("Topic", name)


@pytest.mark.parametrize(
    ("key", "kind", "name", "pattern"),
    [
        ("*", "Any", "", "ANY"),
        ("Topic:*", "Topic", "", "ANY"),
        ("topic:orders", "Topic", "orders", "LITERAL"),
        ("Group:g-*", "Group", "g-", "PREFIXED"),
        ("Cluster:DefaultCluster", "Cluster", "DefaultCluster", "LITERAL"),
        ("Namespace:ns1", "Namespace", "ns1", "LITERAL"),
    ],
)
def test_resource_keys_parse_and_print_back(key: str, kind: str, name: str, pattern: str) -> None:
    r = Resource.parse(key)
    assert (r.type, r.name, r.pattern) == (kind, name, pattern)
    assert Resource.parse(r.key) == r


@pytest.mark.parametrize("bad", ["", "Topic", "Queue:x", None, 5])
def test_a_bad_resource_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(AuthMetadataError):
        Resource.parse(bad)


def test_patterns_match_what_they_name() -> None:
    assert Resource.parse("Topic:ord*").matches(topic("orders"))
    assert not Resource.parse("Topic:ord*").matches(topic("or"))
    assert not Resource.parse("Topic:orders").matches(topic("orders2"))
    assert Resource.parse("Topic:*").matches(topic("anything"))
    assert not Resource.parse("Topic:*").matches(Resource("Group", "g"))
    assert Resource.parse("*").matches(Resource("Group", "g"))


def test_the_most_specific_matching_entry_decides() -> None:
    a = acl(
        entry("*", "All", "Deny"),
        entry("Topic:*", "Pub", "Allow"),
        entry("Topic:ord*", "Pub", "Deny"),
        entry("Topic:orders-*", "Pub", "Allow"),
        entry("Topic:orders-eu", "Pub", "Deny"),
    )
    assert decide(a, topic("orders-eu"), ["Pub"], "1.1.1.1") is not None  # literal: Deny
    assert decide(a, topic("orders-us"), ["Pub"], "1.1.1.1") is None  # longer prefix: Allow
    assert decide(a, topic("ordinal"), ["Pub"], "1.1.1.1") is not None  # shorter prefix: Deny
    assert decide(a, topic("news"), ["Pub"], "1.1.1.1") is None  # Topic:*: Allow
    assert decide(a, Resource("Group", "g"), ["Sub"], "1.1.1.1") is not None  # *: Deny


def test_deny_wins_among_equally_specific_entries() -> None:
    allow = PolicyEntry(Resource.parse("Topic:t"), ("Pub",), (), "Allow")
    deny = PolicyEntry(Resource.parse("Topic:t"), ("All",), (), "Deny")
    assert best_entry([allow, deny]) is deny
    assert best_entry([deny, allow]) is deny


def test_an_entry_decides_only_for_its_actions() -> None:
    a = acl(entry("Topic:t", "Pub", "Allow"), entry("Topic:*", "Sub", "Deny"))
    assert decide(a, topic("t"), ["Pub"], "h") is None
    reason = decide(a, topic("t"), ["Sub"], "h")  # Topic:t does not speak of Sub: Topic:* does
    assert reason == "the decision is deny."
    assert decide(a, topic("t"), ["Sub", "Get"], "h") is not None
    assert decide(acl(entry("Topic:t", "All")), topic("t"), ["Delete"], "h") is None
    assert decide(a, topic("t"), ["Any"], "h") is None  # any entry on the resource


def test_source_addresses_limit_an_entry() -> None:
    a = acl(entry("Topic:t", "Pub", "Allow", ("10.0.0.0/8", "192.168.1.7", "fd00::/8")))
    assert decide(a, topic("t"), ["Pub"], "10.2.3.4") is None
    assert decide(a, topic("t"), ["Pub"], "192.168.1.7") is None
    assert decide(a, topic("t"), ["Pub"], "::ffff:10.9.9.9") is None
    assert decide(a, topic("t"), ["Pub"], "fd00::1") is None
    assert decide(a, topic("t"), ["Pub"], "192.168.1.8") == "no matched policies."
    with pytest.raises(AuthMetadataError, match="source ip"):
        acl(entry("Topic:t", "Pub", "Allow", ("10.0.0.300/8",)))


def test_custom_first_then_default_then_refused() -> None:
    a = acl(entry("Topic:t", "Pub"), default=[entry("Topic:*", "Sub"), entry("Group:*", "Sub")])
    assert decide(a, topic("t"), ["Pub"], "h") is None
    assert decide(a, topic("other"), ["Sub"], "h") is None  # Default
    assert decide(a, topic("other"), ["Pub"], "h") == "no matched policies."
    assert decide(None, topic("t"), ["Pub"], "h") == "no matched policies."


def test_an_entry_needs_actions_and_a_decision() -> None:
    with pytest.raises(AuthMetadataError, match="actions is empty"):
        acl(entry("Topic:t", "Nonsense"))
    with pytest.raises(AuthMetadataError, match="can not be Any"):
        acl(entry("Topic:t", "Any"))
    with pytest.raises(AuthMetadataError, match="decision"):
        acl(entry("Topic:t", "Pub", "Maybe"))
    spelled = acl(entry("topic:t", "pub,SUB", "allow"))
    assert spelled.to_json()["policies"][0]["entries"][0] == {
        "resource": "Topic:t",
        "actions": ["Pub", "Sub"],
        "decision": "Allow",
    }


def test_an_entrys_addresses_are_sent_only_when_it_has_some() -> None:
    limited = acl(entry("Topic:t", "Pub"))
    doc = limited.to_json()
    assert "sourceIps" not in doc["policies"][0]["entries"][0]  # RocketMQ 5.3 sends none
    doc["policies"][0]["entries"][0]["sourceIps"] = ["10.0.0.0/8"]
    read = Acl.from_json(doc)
    assert read.to_json()["policies"][0]["entries"][0]["sourceIps"] == ["10.0.0.0/8"]
    assert Acl.from_json(limited.to_json()) == limited


# ---- users: authentication and the principal's decisions ---------------------------------------


def rules(settings: AuthSettings = ON, **acls: Acl) -> AuthRules:
    users = [
        User("root", "rootpass", "Super"),
        User("alice", "alicepass"),
        User("mallory", "mallorypass", "Normal", "disable"),
    ]
    return AuthRules(users={u.username: u for u in users}, acls=acls, settings=settings)


def login(r: AuthRules, name: str | None, password: str = "", host: str = "10.0.0.1") -> Any:
    return r.authenticate(host=host, access_key=name, verify=lambda secret: secret == password)


def test_authentication_needs_a_known_enabled_user_and_the_password() -> None:
    r = rules()
    p = login(r, "alice", "alicepass")
    assert isinstance(p, Principal) and p.user is not None and p.user.username == "alice"
    for name, password, why in [
        (None, "", "username cannot be null."),
        ("bob", "x", "User:bob is not found."),
        ("mallory", "mallorypass", "User:mallory is disabled."),
        ("alice", "wrong", "check signature failed."),
    ]:
        with pytest.raises(AccessDeniedError) as info:
            login(r, name, password)
        assert str(info.value) == why
        assert not isinstance(info.value, PermissionDeniedError)


def test_a_super_user_passes_every_check_a_normal_one_only_its_acl() -> None:
    r = rules(**{"User:alice": acl(entry("Topic:x", "Pub"), entry("Group:g", "Sub"))})
    root = login(r, "root", "rootpass")
    root.check(0, {"anything": PUB, "%RETRY%any": SUB}, True)
    alice = login(r, "alice", "alicepass")
    alice.check(0, {"x": PUB, "%RETRY%g": SUB}, False)
    with pytest.raises(PermissionDeniedError) as info:
        alice.check(0, {"y": PUB}, False)
    assert str(info.value) == (
        "User:alice has no permission to access Topic:y from 10.0.0.1, no matched policies."
    )
    assert info.value.resource == "Topic:y"
    with pytest.raises(PermissionDeniedError):
        alice.check(0, {"x": SUB}, False)
    with pytest.raises(PermissionDeniedError, match="Cluster:C1"):
        alice.check(0, {}, True)


def test_switches_work_apart() -> None:
    only_authn = AuthSettings(authentication_enabled=True, cluster_name="C1")
    alice = login(rules(only_authn), "alice", "alicepass")
    alice.check(0, {"y": PUB}, True)  # authenticated; nothing is authorised
    with pytest.raises(AccessDeniedError):
        login(rules(only_authn), "alice", "bad")
    only_authz = AuthSettings(authorization_enabled=True)
    r = rules(only_authz, **{"User:alice": acl(entry("Topic:x", "Pub"))})
    unsigned_alice = login(r, "alice", "not checked")
    unsigned_alice.check(0, {"x": PUB}, False)  # the AccessKey taken at its word
    with pytest.raises(PermissionDeniedError):
        unsigned_alice.check(0, {"y": PUB}, False)
    nobody = login(r, None)
    with pytest.raises(PermissionDeniedError):
        nobody.check(0, {"x": PUB}, False)
    nobody.check(0, {}, False)  # nothing named: nothing to decide
    assert login(rules(AuthSettings()), "alice") is None  # both off: no checks


def test_a_disabled_user_is_refused_even_unauthenticated() -> None:
    r = rules(AuthSettings(authorization_enabled=True), **{"User:mallory": acl(entry("*", "All"))})
    with pytest.raises(PermissionDeniedError, match="disabled"):
        login(r, "mallory").check(0, {"t": PUB}, False)


def test_user_changes_keep_what_they_do_not_name() -> None:
    old = User("alice", "alicepass")
    change = UserChange.from_json({"userType": "super"}, "alice")
    assert change.applied_to(old) == User("alice", "alicepass", "Super", "enable")
    assert UserChange.from_json({"password": "p2"}, "alice").applied_to(old).password == "p2"
    with pytest.raises(AuthMetadataError, match="password can not be blank"):
        UserChange.from_json({}, "bob").created()
    with pytest.raises(AuthMetadataError, match="userType"):
        UserChange.from_json({"password": "x", "userType": "Admin"}, "bob")


def test_whitelisted_codes_skip_authentication_or_authorisation() -> None:
    from rocketstore.acl import RequestSigner
    from rocketstore.acl._remoting import check_request
    from rocketstore.remoting import RemotingCommand

    settings = AuthSettings(
        authentication_enabled=True,
        authorization_enabled=True,
        authentication_whitelist=frozenset({30}),
        authorization_whitelist=frozenset({31}),
    )
    r = rules(settings, **{"User:alice": acl(entry("Topic:x", "Get"))})

    def request(code: int, topic: str, signer: Any = None) -> RemotingCommand:
        cmd = RemotingCommand.request(code, {"topic": topic, "queueId": "0"})
        if signer is not None:
            signer(cmd)
        return cmd

    forged = RequestSigner("alice", "not-her-password")
    check_request(r, request(30, "x", forged), "10.0.0.1")  # not authenticated, authorised
    with pytest.raises(PermissionDeniedError):
        check_request(r, request(30, "y", forged), "10.0.0.1")
    with pytest.raises(AccessDeniedError, match="check signature failed"):
        check_request(r, request(31, "y", forged), "10.0.0.1")
    check_request(r, request(31, "y", RequestSigner("alice", "alicepass")), "10.0.0.1")
    with pytest.raises(PermissionDeniedError):
        check_request(r, request(32, "y", RequestSigner("alice", "alicepass")), "10.0.0.1")

"""The authorisation table (rocketstore.acl._table, grpc/_acl.py's METHODS) against the servers
that use it: every request code a real broker and name server serve has a rule, every gRPC
method has one, and each rule refuses a request it must refuse and lets through one it must
let through, as raw signed frames through the real servers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rocketstore.acl._table import BROKER, CONTROLLER, NAMESRV, UNLISTED, Access, rule
from rocketstore.grpc._acl import METHODS, AclServicer
from support.acl_env import (
    ACL_YML,
    ADMIN,
    ATTACKER,
    BROKER_SAMPLES,
    NAMESRV_SAMPLES,
    UNSIGNED,
    USER,
    World,
    acl_refused,
    acl_world,
    call,
    served_codes,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield from acl_world(tmp_path_factory.mktemp("acl_world"))


def test_every_served_code_has_a_rule(world: World) -> None:
    broker, namesrv = served_codes(world)
    assert sorted(broker - set(BROKER)) == [], "broker codes served without a rule"
    assert sorted(namesrv - set(NAMESRV)) == [], "name server codes served without a rule"
    assert sorted(set(BROKER) - broker) == [], "rules of codes the broker does not serve"
    assert sorted(set(NAMESRV) - namesrv) == [], "rules of codes the name server does not serve"
    assert set(BROKER_SAMPLES) == set(BROKER) and set(NAMESRV_SAMPLES) == set(NAMESRV)


def test_an_unlisted_code_needs_an_admin() -> None:
    assert rule(BROKER, 12345) is UNLISTED and UNLISTED.access is Access.ADMIN


def test_every_grpc_method_has_a_rule() -> None:
    from rocketstore.grpc._pb import service_pb2

    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    methods = {m.name for m in service.methods}
    assert sorted(methods - set(METHODS)) == [], "gRPC methods without a rule"
    assert sorted(set(METHODS) - methods) == []
    service = type("Service", (), {name: (lambda *args: None) for name in methods})()
    wrapped = AclServicer(service, checker=None)  # type: ignore[arg-type]
    for name in methods:
        assert callable(getattr(wrapped, name, None)), f"{name} is not checked"


def _cases(code: int, access: Access) -> tuple[object, object, str, str]:
    """(refused signer, allowed signer, topic, group) of a rule's pair of requests."""
    if access is Access.ADMIN:
        return USER, ADMIN, "Shared", "GShared"
    if access is Access.SIGNED:
        return UNSIGNED, ATTACKER, "Shared", "GShared"
    return ATTACKER, USER, "Shared", "GShared"


@pytest.mark.parametrize("code", sorted(BROKER))
def test_broker_rule(world: World, code: int) -> None:
    r = BROKER[code]
    sample = BROKER_SAMPLES[code]
    refused_by, allowed_by, topic, group = _cases(code, r.access)
    ext, body = sample(world, topic, group)
    refused = call(world.address, code, ext, refused_by, body)
    assert acl_refused(refused), (r.name, refused.code, refused.remark)
    unsigned = call(world.address, code, ext, UNSIGNED, body)
    assert acl_refused(unsigned) and "No accessKey" in (unsigned.remark or ""), r.name
    if r.then is not None and code != 37:
        # what the handler learns (the message found, the body decoded) is checked too: the
        # user's group is its own, the topic is not
        ext, body = sample(world, "Secret", "GShared")
        late = call(world.address, code, ext, USER, body)
        if code == 12:
            assert acl_refused(late), (r.name, late.remark)  # the topic named: before
        else:
            assert acl_refused(late) and "topic:Secret" in (late.remark or ""), (r.name, late)
    ext, body = sample(world, topic, group)
    allowed = call(world.address, code, ext, allowed_by, body)
    assert not acl_refused(allowed), (r.name, allowed.remark)


@pytest.mark.parametrize("code", sorted(NAMESRV))
def test_namesrv_rule(world: World, code: int) -> None:
    r = NAMESRV[code]
    refused_by, allowed_by, _topic, group = _cases(code, r.access)
    ext, body = NAMESRV_SAMPLES[code](world, "TableTopic", group)
    for signer in {id(refused_by): refused_by, id(UNSIGNED): UNSIGNED}.values():
        refused = call(world.namesrv_address, code, ext, signer, body)
        assert acl_refused(refused), (r.name, refused.code, refused.remark)
    allowed = call(world.namesrv_address, code, ext, allowed_by, body)
    assert not acl_refused(allowed), (r.name, allowed.remark)


# ---- the controller ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """RocketMQ 5's controller (file backend) checking ACL_YML."""
    from rocketstore.controller import ControllerConfig
    from rocketstore.server import ControllerServer
    from support.remoting import LoopThread

    root = tmp_path_factory.mktemp("acl_controller")
    (root / "plain_acl.yml").write_text(ACL_YML)
    config = ControllerConfig(listen_port=0, store_path=str(root / "controller"))
    server = ControllerServer(config, acl_file=str(root / "plain_acl.yml"))
    loop = LoopThread()
    try:
        loop.run(server.start())
        yield loop, server
        loop.run(server.shutdown())
    finally:
        loop.stop()


def test_every_controller_code_has_a_rule(controller: Any) -> None:
    loop, server = controller
    served = {int(c) for c in loop.call(lambda: list(server._remoting.handlers))}
    assert sorted(served - set(CONTROLLER)) == [], "controller codes served without a rule"
    assert sorted(set(CONTROLLER) - served) == []


@pytest.mark.parametrize("code", sorted(CONTROLLER))
def test_controller_rule(controller: Any, code: int) -> None:
    _, server = controller
    r = CONTROLLER[code]
    refused_by, allowed_by, _topic, _group = _cases(code, r.access)
    ext = {
        "clusterName": "AclCluster",
        "brokerName": "broker-x",
        "brokerId": "1",
        "brokerAddress": "127.0.0.1:1",
        "masterEpoch": "1",
        "applyBrokerId": "1",
        "registerCheckCode": "127.0.0.1:1;1",
    }
    for signer in {id(refused_by): refused_by, id(UNSIGNED): UNSIGNED}.values():
        refused = call(server.address, code, ext, signer)
        assert acl_refused(refused), (r.name, refused.code, refused.remark)
    allowed = call(server.address, code, ext, allowed_by)
    assert not acl_refused(allowed), (r.name, allowed.remark)

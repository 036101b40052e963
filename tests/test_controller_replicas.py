"""What each controller request does to a group's record (RocketMQ 5.1.4's ReplicasInfoManager and
DefaultElectPolicy), as pure functions over records and a heartbeat table on a manual clock:
id allocation, registration, elections (first one, by policy, designated, unclean, none
possible), the fenced SyncStateSet changes, cleaning, and the record's stored form."""

from __future__ import annotations

import pytest

from rocketstore.controller import GroupRecord, StateCorruptError
from rocketstore.controller import _replicas as replicas
from rocketstore.controller._elect import elect
from rocketstore.controller._heartbeat import BrokerLiveTable
from rocketstore.protocol._controller_bodies import ElectMasterResponseBody, SyncStateSet
from rocketstore.protocol._controller_headers import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerHeartbeatRequest,
    CleanBrokerDataRequest,
    GetNextBrokerIdRequest,
    RegisterBrokerRequest,
)
from rocketstore.remoting import RequestError, ResponseCode
from rocketstore.store._clock import ManualClock

C, B = "DefaultCluster", "broker-a"


def group(*ids: int) -> GroupRecord:
    record = GroupRecord(C, B)
    for i in ids:
        record = record.with_replica(i, f"127.0.0.1:{30000 + i}", f"127.0.0.1:{30000 + i};1")
    return record


def apply(record: GroupRecord | None, broker_id: int, code: str | None = None) -> replicas.Outcome:
    check = code or f"127.0.0.1:{30000 + broker_id};1"
    return replicas.apply_broker_id(ApplyBrokerIdRequest(C, B, broker_id, check), record)


def live_table(clock: ManualClock, **brokers: tuple[int, int, int]) -> BrokerLiveTable:
    """b<id>=(epoch, max offset, priority) heartbeats."""
    table = BrokerLiveTable(clock)
    for name, (epoch, offset, priority) in brokers.items():
        broker_id = int(name[1:])
        table.heartbeat(
            BrokerHeartbeatRequest(C, f"127.0.0.1:{30000 + broker_id}", B, broker_id, epoch,
                                   offset, None, 10_000, priority),
            None,
        )  # fmt: skip
    return table


# ---- ids and registration ---------------------------------------------------------------------


def test_broker_ids_are_handed_out_from_one() -> None:
    assert (
        replicas.next_broker_id(GetNextBrokerIdRequest(C, B), None).header.to_ext()["nextBrokerId"]
        == "1"
    )  # type: ignore[union-attr]
    first = apply(None, 1)
    assert first.code == ResponseCode.SUCCESS and first.record is not None
    assert first.record.next_broker_id == 2
    # a first id other than 1 is refused
    assert apply(None, 2).code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    # the same broker applying again (same check code) changes nothing; another is refused
    again = apply(first.record, 1)
    assert again.code == ResponseCode.SUCCESS and not again.writes
    taken = apply(first.record, 1, "127.0.0.1:9;2")
    assert taken.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    second = apply(first.record, 2)
    assert second.record is not None and sorted(second.record.replicas) == [1, 2]
    assert second.record.address_of(2) == "127.0.0.1:30002"


def test_a_group_has_at_most_max_replicas() -> None:
    record = group(*range(1, replicas.MAX_REPLICAS + 1))
    out = apply(record, replicas.MAX_REPLICAS + 1)
    assert out.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID and "the most" in (
        out.remark or ""
    )
    assert apply(record, 1).code == ResponseCode.SUCCESS  # one of its own, again


def test_a_heartbeat_table_is_bounded() -> None:
    from rocketstore.controller import _heartbeat

    clock = ManualClock()
    table = BrokerLiveTable(clock)
    beat = BrokerHeartbeatRequest(C, "x", B, 1, heartbeat_timeout_mills=1 << 62)
    assert table.heartbeat(beat, None) is True
    clock.advance(_heartbeat.MAX_HEARTBEAT_TIMEOUT_MS / 1000 + 1)
    assert not table.is_alive(C, B, 1)  # a timeout asked beyond the cap lives the cap
    old = _heartbeat.MAX_BROKERS
    _heartbeat.MAX_BROKERS = 2
    try:
        assert table.heartbeat(beat.__class__(C, "y", B, 2), None) is True
        assert table.heartbeat(beat.__class__(C, "z", B, 3), None) is None  # full: dropped
        assert table.heartbeat(beat.__class__(C, "y", B, 2), None) is False  # known: kept
    finally:
        _heartbeat.MAX_BROKERS = old


def test_register_answers_the_live_master_and_records_a_new_address() -> None:
    record = group(1, 2).with_master(1)
    req = RegisterBrokerRequest(C, B, 2, "127.0.0.1:40002")
    out = replicas.register_broker(req, record, alive=lambda i: True)
    assert out.header is not None and out.header.to_ext()["masterBrokerId"] == "1"
    assert SyncStateSet.decode(out.body) == SyncStateSet(frozenset({1}), 1)
    assert out.record is not None and out.record.address_of(2) == "127.0.0.1:40002"
    # a dead master is not named
    out = replicas.register_broker(req, record, alive=lambda i: i != 1)
    assert "masterBrokerId" not in out.header.to_ext()  # type: ignore[union-attr]
    unknown = RegisterBrokerRequest(C, B, 7, "127.0.0.1:1")
    assert replicas.register_broker(unknown, record, lambda i: True).code == (
        ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    )
    assert replicas.register_broker(req, None, lambda i: True).code == (
        ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    )
    with pytest.raises(RequestError, match="brokerAddress"):
        replicas.register_broker(RegisterBrokerRequest(C, B, 2, None), record, lambda i: True)


# ---- elections ----------------------------------------------------------------------------------


def test_the_first_election_makes_the_asking_broker_master() -> None:
    out = replicas.elect_master(
        group(1, 2), 2, trigger=replicas.BY_BROKER, alive=lambda i: True,
        live_info=lambda i: None, unclean=False,
    )  # fmt: skip
    assert out.code == ResponseCode.SUCCESS and out.record is not None
    assert (out.record.master_id, out.record.master_epoch) == (2, 1)
    assert (out.record.sync_state_set, out.record.sync_state_set_epoch) == (frozenset({2}), 1)
    body = ElectMasterResponseBody.decode(out.body)
    assert body.broker_member_group is not None
    assert dict(body.broker_member_group.broker_addrs) == {
        1: "127.0.0.1:30001",
        2: "127.0.0.1:30002",
    }
    assert out.election is not None and out.election.result == replicas.NEW_MASTER_ELECTED


def test_policy_prefers_epoch_then_offset_then_priority() -> None:
    clock = ManualClock()
    table = live_table(clock, b1=(3, 100, 5), b2=(4, 50, 5), b3=(4, 90, 9), b4=(4, 90, 1))
    info = table.info_getter(C, B)
    alive = table.alive_checker(C, B)
    members = {1, 2, 3, 4}
    assert elect(members, None, alive=alive, live_info=info, old_master=None) == 4
    assert elect({1, 2, 3}, None, alive=alive, live_info=info, old_master=None) == 3
    assert elect({1, 2}, None, alive=alive, live_info=info, old_master=None) == 2
    # the old master stays while it is alive, unless another is designated
    assert elect(members, None, alive=alive, live_info=info, old_master=1) == 1
    assert elect(members, None, alive=alive, live_info=info, old_master=1, prefer=2) == 2
    # a designated broker outside the set is nobody, unless unclean elections are on
    assert elect({1}, None, alive=alive, live_info=info, old_master=None, prefer=3) is None
    assert elect({1}, members, alive=alive, live_info=info, old_master=None, prefer=3) == 3


def test_heartbeats_expire_on_the_clock() -> None:
    clock = ManualClock()
    table = live_table(clock, b1=(1, 0, 0))
    assert table.is_alive(C, B, 1)
    clock.advance(10.0)
    assert table.is_alive(C, B, 1)  # exactly at its timeout: still alive, as RocketMQ counts
    clock.advance(0.5)
    assert not table.is_alive(C, B, 1)
    assert [b.broker_id for b in table.expire()] == [1] and len(table) == 0


def test_a_dead_master_is_replaced_from_the_sync_state_set_only() -> None:
    record = group(1, 2, 3).with_master(1).with_sync_state_set(frozenset({1, 2}))
    alive = {2, 3}.__contains__
    out = replicas.elect_master(
        record, None, trigger=replicas.BY_CONTROLLER, alive=alive, live_info=lambda i: None,
        unclean=False,
    )  # fmt: skip
    assert out.record is not None and out.record.master_id == 2
    assert (out.record.master_epoch, out.record.sync_state_set_epoch) == (2, 3)
    # 2 dead too: 3 is outside the set, so nobody (the group left without a master)
    out = replicas.elect_master(
        record, None, trigger=replicas.BY_CONTROLLER, alive={3}.__contains__,
        live_info=lambda i: None, unclean=False,
    )  # fmt: skip
    assert out.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert out.record is not None and out.record.master_id is None
    assert out.record.master_epoch == 2 and out.record.sync_state_set == frozenset({1, 2})
    # ... or 3 with unclean elections allowed
    out = replicas.elect_master(
        record, None, trigger=replicas.BY_CONTROLLER, alive={3}.__contains__,
        live_info=lambda i: None, unclean=True,
    )  # fmt: skip
    assert out.record is not None and out.record.master_id == 3
    # a broker's own request that elects nobody changes nothing
    out = replicas.elect_master(
        record, 3, trigger=replicas.BY_BROKER, alive={3}.__contains__, live_info=lambda i: None,
        unclean=False,
    )  # fmt: skip
    assert out.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED and not out.writes


def test_a_live_master_is_kept() -> None:
    record = group(1, 2).with_master(1).with_sync_state_set(frozenset({1, 2}))
    out = replicas.elect_master(
        record, 2, trigger=replicas.BY_BROKER, alive=lambda i: True, live_info=lambda i: None,
        unclean=False,
    )  # fmt: skip
    assert out.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST and not out.writes
    assert out.header is not None and out.header.to_ext()["masterBrokerId"] == "1"
    assert ElectMasterResponseBody.decode(out.body).broker_member_group is None
    assert replicas.elect_master(
        None, 1, trigger=replicas.BY_BROKER, alive=lambda i: True, live_info=lambda i: None,
        unclean=False,
    ).code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED  # fmt: skip


def test_needs_election_when_the_master_is_dead_and_another_lives() -> None:
    record = group(1, 2).with_master(1)
    assert replicas.needs_election(record, {2}.__contains__)
    assert not replicas.needs_election(record, {1, 2}.__contains__)
    assert not replicas.needs_election(record, lambda i: False)  # nobody to elect
    assert not replicas.needs_election(group(1, 2), {2}.__contains__)  # never had a master


# ---- the SyncStateSet -------------------------------------------------------------------------


def alter(record: GroupRecord | None, members: set[int], set_epoch: int, *, master: int = 1,
          master_epoch: int = 1, alive: set[int] | None = None) -> replicas.Outcome:  # fmt: skip
    req = AlterSyncStateSetRequest(B, master, master_epoch)
    live = (alive if alive is not None else {1, 2, 3}).__contains__
    return replicas.alter_sync_state_set(
        req, SyncStateSet(frozenset(members), set_epoch), record, live
    )


def test_alter_sync_state_set_is_fenced_in_rocketmqs_order() -> None:
    record = group(1, 2, 3).with_master(1)  # master epoch 1, set {1} at epoch 1
    ok = alter(record, {1, 2}, 1)
    assert ok.code == ResponseCode.SUCCESS and ok.record is not None
    assert ok.header is not None and ok.header.to_ext() == {"newSyncStateSetEpoch": "2"}
    assert SyncStateSet.decode(ok.body) == SyncStateSet(frozenset({1, 2}), 2)
    failed = ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert alter(record, {1}, 1).code == failed  # the same set
    assert alter(record, {1, 2}, 1, master=2).code == ResponseCode.CONTROLLER_INVALID_MASTER
    assert (
        alter(record, {1, 2}, 1, master_epoch=0).code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    )
    assert alter(record, {1, 2}, 0).code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert alter(record, {1, 9}, 1).code == ResponseCode.CONTROLLER_INVALID_REPLICAS
    assert alter(record, {1, 2}, 1, alive={1}).code == ResponseCode.CONTROLLER_BROKER_NOT_ALIVE
    assert alter(record, {2, 3}, 1).code == failed  # without the master
    assert alter(None, {1, 2}, 1).code == failed
    # an old master's request after a new election is fenced by the master epoch
    newer = ok.record.with_master(2)
    assert alter(newer, {1, 2}, 3, master=2, master_epoch=1).code == (
        ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    )


# ---- cleaning -----------------------------------------------------------------------------------


def clean(record: GroupRecord | None, ids: str | None = None, living: bool = False,
          alive: set[int] | None = None) -> replicas.Outcome:  # fmt: skip
    req = CleanBrokerDataRequest(B, C, ids, living)
    return replicas.clean_broker_data(req, record, (alive or set()).__contains__)


def test_clean_refuses_living_brokers_unless_told() -> None:
    record = group(1, 2, 3).with_master(1).with_sync_state_set(frozenset({1, 2}))
    refused = ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert clean(record).code == refused  # the group has a master
    assert clean(record, "3", alive={3}).code == refused
    assert clean(record, "x;1").code == refused
    assert clean(None, "1").code == refused  # no such group
    out = clean(record, "3")
    assert out.record is not None and sorted(out.record.replicas) == [1, 2]
    # cleaning the master leaves the group without one, at a higher master epoch
    out = clean(record, "1", living=True, alive={1})
    assert out.record is not None and out.record.master_id is None
    assert out.record.master_epoch == 2 and out.record.sync_state_set == frozenset({2})
    assert clean(record, living=True).delete
    assert clean(record, "1;2", living=True).delete  # the set would be empty


# ---- the stored record --------------------------------------------------------------------------


def test_record_round_trip_and_corruption() -> None:
    record = group(1, 2).with_master(2).with_sync_state_set(frozenset({1, 2}))
    assert GroupRecord.decode(record.encode()) == record
    for bad in (
        b"",
        b"{",
        b"[]",
        b'{"v":2}',
        record.encode().replace(b'"masterEpoch":1', b'"masterEpoch":"1"'),
        record.encode().replace(b'"masterEpoch":1', b'"masterEpoch":-1'),
        record.encode().replace(b'"replicas"', b'"replicaz"'),
    ):
        with pytest.raises(StateCorruptError):
            GroupRecord.decode(bad)

"""One contract, both backends: every test here runs once over the file backend and once over a
3-member etcd cluster on loopback (skipped, saying so, without etcd).

The backend's verbs (compare-and-set on revisions, one leader at a time, a write refused to a
controller that does not lead, state that outlives the controller), then the controller through
its port with raw frames as a RocketMQ 5.1.4 broker sends them: registration, the first election,
the SyncStateSet, a master whose connection closes or whose heartbeats stop replaced from the
SyncStateSet with both epochs growing and the group's brokers told, a standby answering
NOT_LEADER and naming the active controller, a restart that keeps every epoch, bad requests
answered while the server keeps serving."""

from __future__ import annotations

import asyncio
import json

from rocketstore.controller import GroupRecord, LeadershipLostError, Member
from rocketstore.protocol._controller_bodies import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    SyncStateSet,
)
from rocketstore.protocol._controller_headers import CleanBrokerDataRequest, GetReplicaInfoRequest
from rocketstore.remoting import AsyncRemotingClient, RemotingCommand, RequestCode, ResponseCode
from support.controllers import CLUSTER, Backends, FakeBroker, backends, etcd_cluster, run, until

__all__ = ["backends", "etcd_cluster"]  # fixtures: every test runs over both backends

ME = Member("n0", "127.0.0.1:1")
OTHER = Member("n1", "127.0.0.1:2")


def record(epoch: int = 0) -> GroupRecord:
    r = GroupRecord(CLUSTER, "broker-a").with_replica(1, "127.0.0.1:30001", "127.0.0.1:30001;1")
    for _ in range(epoch):
        r = r.with_master(1)
    return r


# ---- the backend's verbs --------------------------------------------------------------------------


def test_compare_and_set_on_revisions(backends: Backends) -> None:
    async def main() -> None:
        backend = backends.make()
        await backend.open()
        try:
            assert await backend.take_leadership(ME)
            assert await backend.read("broker-a") is None
            first = await backend.compare_and_set("broker-a", record(1), 0)
            assert first is not None and first > 0
            # creating it again, or writing over a revision that is not the stored one: refused
            assert await backend.compare_and_set("broker-a", record(2), 0) is None
            assert await backend.compare_and_set("broker-a", record(2), first + 100) is None
            read = await backend.read("broker-a")
            assert read is not None and read.revision == first and read.record == record(1)
            second = await backend.compare_and_set("broker-a", record(2), first)
            assert second is not None and second > first
            assert await backend.compare_and_set("broker-b", record(1), 0) is not None
            assert sorted(await backend.read_all()) == ["broker-a", "broker-b"]
            assert await backend.compare_and_set("broker-b", None, 0) is None
            b = await backend.read("broker-b")
            assert b is not None and await backend.compare_and_set("broker-b", None, b.revision)
            assert await backend.read("broker-b") is None
        finally:
            await backend.close()

    run(main)


def test_one_leader_at_a_time_and_only_it_writes(backends: Backends) -> None:
    async def main() -> None:
        one, two = backends.make(), backends.make()
        await one.open()
        await two.open()
        try:
            assert await one.take_leadership(ME)
            assert not await two.take_leadership(OTHER)
            assert one.holds_leadership() and not two.holds_leadership()
            assert await two.leader() == ME and await one.leader() == ME
            assert ME in await two.members()
            try:
                await two.compare_and_set("broker-a", record(1), 0)
            except LeadershipLostError:
                pass
            else:
                raise AssertionError("a controller without the leadership wrote")
            assert await one.compare_and_set("broker-a", record(1), 0) is not None
            # the leader lets go: the other takes over, and the first may write no more
            await one.release_leadership()
            assert await two.take_leadership(OTHER)
            assert await one.leader() == OTHER
            try:
                await one.compare_and_set("broker-a", record(2), 1)
            except LeadershipLostError:
                pass
            else:
                raise AssertionError("a controller that let go of the leadership wrote")
            read = await two.read("broker-a")
            assert read is not None and read.record == record(1)
        finally:
            await one.close()
            await two.close()

    run(main)


def test_state_outlives_the_controller(backends: Backends) -> None:
    async def main() -> None:
        backend = backends.make()
        await backend.open()
        assert await backend.take_leadership(ME)
        assert await backend.compare_and_set("broker-a", record(3), 0) is not None
        await backend.close()
        again = backends.make()
        await again.open()
        try:
            read = await again.read("broker-a")
            assert read is not None and read.record.master_epoch == 3
        finally:
            await again.close()

    run(main)


# ---- the controller through its port ---------------------------------------------------------------


def test_register_elect_and_alter_as_a_broker_does(backends: Backends) -> None:
    async def main() -> None:
        server = backends.server()
        await server.start()
        a = await FakeBroker(server.address).start()
        b = await FakeBroker(server.address).start()
        try:
            meta = await a.call(RequestCode.CONTROLLER_GET_METADATA_INFO)
            assert meta.code == ResponseCode.SUCCESS
            assert meta.ext_fields["controllerLeaderAddress"] == server.address
            assert meta.ext_fields["isLeader"] == "true"
            first = await a.register()
            assert "masterBrokerId" not in first.ext_fields  # nobody is master yet
            await b.register()
            assert (a.broker_id, b.broker_id) == (1, 2)
            await a.heartbeat()
            await b.heartbeat()
            elected = await a.elect()
            assert elected.code == ResponseCode.SUCCESS, elected.remark
            assert elected.ext_fields["masterBrokerId"] == "1"
            assert elected.ext_fields["masterAddress"] == a.address
            assert (elected.ext_fields["masterEpoch"], elected.ext_fields["syncStateSetEpoch"]) == (
                "1",
                "1",
            )
            body = ElectMasterResponseBody.decode(elected.body)
            assert body.broker_member_group is not None
            assert dict(body.broker_member_group.broker_addrs) == {1: a.address, 2: b.address}
            # the other broker asks too: the master stays
            kept = await b.elect()
            assert kept.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
            # both brokers were told who the master is
            await until(lambda: a.notices and b.notices, what="role notices")
            notice = b.notices[-1]
            assert notice.ext_fields["masterBrokerId"] == "1"
            assert notice.ext_fields["masterAddress"] == a.address
            assert SyncStateSet.decode(notice.body) == SyncStateSet(frozenset({1}), 1)
            # the master adds its slave to the SyncStateSet; a stale set epoch is fenced
            altered = await a.alter({1, 2}, master_epoch=1, set_epoch=1)
            assert altered.code == ResponseCode.SUCCESS, altered.remark
            assert altered.ext_fields["newSyncStateSetEpoch"] == "2"
            stale = await a.alter({1}, master_epoch=1, set_epoch=1)
            assert stale.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
            replica = await b.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            assert replica.ext_fields["masterBrokerId"] == "1"
            assert SyncStateSet.decode(replica.body) == SyncStateSet(frozenset({1, 2}), 2)
            data = await b.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["broker-a"]')
            info = BrokerReplicasInfo.decode(data.body).table["broker-a"]
            assert [r.broker_id for r in info.in_sync_replicas] == [1, 2]
            assert all(r.alive for r in info.in_sync_replicas)
            many = json.dumps([f"nobody-{i}" for i in range(12)] + ["broker-a", "broker-a"])
            data = await b.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=many.encode())
            assert list(BrokerReplicasInfo.decode(data.body).table) == ["broker-a"]
        finally:
            await a.die()
            await b.die()
            await server.shutdown()

    run(main)


async def _group_of_two(server_address: str) -> tuple[FakeBroker, FakeBroker]:
    """Brokers 1 (master) and 2, both in the SyncStateSet (master epoch 1, set epoch 2)."""
    a = await FakeBroker(server_address).start()
    b = await FakeBroker(server_address).start()
    await a.register()
    await b.register()
    await a.heartbeat(epoch=1, max_offset=100, timeout_ms=600)
    await b.heartbeat(epoch=1, max_offset=100, timeout_ms=600)
    assert (await a.elect()).code == ResponseCode.SUCCESS
    assert (await a.alter({1, 2}, master_epoch=1, set_epoch=1)).code == ResponseCode.SUCCESS
    return a, b


def test_a_master_whose_connection_closes_is_replaced_at_once(backends: Backends) -> None:
    async def main() -> None:
        server = backends.server()
        await server.start()
        a, b = await _group_of_two(server.address)
        try:
            b.notices.clear()
            await a.die()
            await until(
                lambda: any(n.ext_fields.get("masterBrokerId") == "2" for n in b.notices),
                what="broker 2 told it is the master",
            )
            notice = [n for n in b.notices if n.ext_fields.get("masterBrokerId") == "2"][-1]
            assert (notice.ext_fields["masterEpoch"], notice.ext_fields["syncStateSetEpoch"]) == (
                "2",
                "3",
            )
            replica = await b.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            assert replica.ext_fields["masterBrokerId"] == "2"
            assert replica.ext_fields["masterEpoch"] == "2"
            # the old master, back with its old epoch, is fenced
            old = await FakeBroker(server.address).start()
            old.broker_id = 1
            fenced = await old.alter({1, 2}, master_epoch=1, set_epoch=2)
            assert fenced.code == ResponseCode.CONTROLLER_INVALID_MASTER
            await old.die()
        finally:
            await b.die()
            await server.shutdown()

    run(main)


def test_a_master_whose_heartbeats_stop_is_replaced(backends: Backends) -> None:
    async def main() -> None:
        server = backends.server()
        await server.start()
        a, b = await _group_of_two(server.address)

        async def keep_beating() -> None:  # broker 2 lives on; broker 1 stays connected, silent
            while True:
                await b.heartbeat(epoch=1, max_offset=100, timeout_ms=600)
                await asyncio.sleep(0.1)

        beating = asyncio.create_task(keep_beating())
        try:
            await until(
                lambda: any(n.ext_fields.get("masterBrokerId") == "2" for n in b.notices),
                what="broker 2 told it is the master",
            )
            replica = await b.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            assert (replica.ext_fields["masterBrokerId"], replica.ext_fields["masterEpoch"]) == (
                "2",
                "2",
            )
            assert SyncStateSet.decode(replica.body) == SyncStateSet(frozenset({2}), 3)
        finally:
            beating.cancel()
            await a.die()
            await b.die()
            await server.shutdown()

    run(main)


def test_a_standby_answers_not_leader_and_names_the_active_one(backends: Backends) -> None:
    async def main() -> None:
        active = backends.server("n0")
        await active.start()
        standby = backends.server("n1")
        await standby.start()
        a = await FakeBroker(active.address).start()
        try:
            await a.register()
            meta = await a.call(RequestCode.CONTROLLER_GET_METADATA_INFO, to=standby.address)
            assert meta.ext_fields["isLeader"] == "false"
            assert meta.ext_fields["controllerLeaderAddress"] == active.address
            assert meta.ext_fields["controllerLeaderId"] == "n0"
            for code in (
                RequestCode.CONTROLLER_GET_REPLICA_INFO,
                RequestCode.CONTROLLER_ELECT_MASTER,
                RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
            ):
                header = {"clusterName": CLUSTER, "brokerName": "broker-a", "brokerId": "1",
                          "designateElect": "false"}  # fmt: skip
                r = await a.call(code, header, to=standby.address)
                assert r.code == ResponseCode.CONTROLLER_NOT_LEADER, (code, r.remark)
            # the active one stops: the standby takes over, with the group as it was
            await active.shutdown()
            await until(lambda: standby.controller.active, what="the standby takes over")
            r = await a.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a"),
                to=standby.address,
            )  # fmt: skip
            assert r.code == ResponseCode.SUCCESS and "masterBrokerId" not in r.ext_fields
            nxt = await a.call(
                RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                {"clusterName": CLUSTER, "brokerName": "broker-a"},
                to=standby.address,
            )
            assert nxt.ext_fields["nextBrokerId"] == "2"
        finally:
            await a.die()
            await standby.shutdown()
            await active.shutdown()

    run(main)


def test_a_restarted_controller_keeps_every_epoch(backends: Backends) -> None:
    async def main() -> None:
        server = backends.server()
        await server.start()
        a, b = await _group_of_two(server.address)
        b.notices.clear()
        await a.die()  # the master dies: broker 2 elected (master epoch 2, set epoch 3)
        await until(lambda: bool(b.notices), what="broker 2 elected")
        await server.shutdown()  # a stopping controller takes nobody for dead
        await b.die()
        again = backends.server()
        await again.start()
        c = await FakeBroker(again.address).start()
        try:
            await until(lambda: again.controller.active, what="active after the restart")
            r = await c.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("2", "2")
            assert SyncStateSet.decode(r.body) == SyncStateSet(frozenset({2}), 3)
            nxt = await c.call(
                RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                {"clusterName": CLUSTER, "brokerName": "broker-a"},
            )
            assert nxt.ext_fields["nextBrokerId"] == "3"
            # broker 1 comes back and asks to be master: it is outside the SyncStateSet
            c.broker_id = 1
            await c.heartbeat(epoch=1, max_offset=100)
            r = await c.elect()
            assert r.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
            # broker 2 comes back: still the master, at the epoch it had
            c.broker_id = 2
            await c.heartbeat(epoch=2, max_offset=200)
            r = await c.elect()
            assert (r.code, r.ext_fields["masterEpoch"]) == (
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                "2",
            )
        finally:
            await c.die()
            await again.shutdown()

    run(main)


def test_bad_requests_are_answered_and_the_server_keeps_serving(backends: Backends) -> None:
    async def main() -> None:
        server = backends.server()
        await server.start()
        client = AsyncRemotingClient(signer=None)
        try:

            async def call(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
                return await client.invoke(server.address, RemotingCommand.request(code, ext, body))

            r = await call(RequestCode.CONTROLLER_ELECT_MASTER, {"brokerName": "b"})
            assert r.code == ResponseCode.SYSTEM_ERROR and "clusterName" in (r.remark or "")
            r = await call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                           {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "1"}, b"{nope")  # fmt: skip
            assert r.code == ResponseCode.SYSTEM_ERROR and "SyncStateSet" in (r.remark or "")
            r = await call(
                RequestCode.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "brokerName": "b"}
            )
            assert r.code == ResponseCode.SYSTEM_ERROR and "appliedBrokerId" in (r.remark or "")
            r = await call(RequestCode.BROKER_HEARTBEAT,
                           {"clusterName": "C", "brokerName": "b", "brokerAddr": "x"})  # fmt: skip
            assert r.code == ResponseCode.CONTROLLER_INVALID_REQUEST
            r = await call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, b"[1]")
            assert r.code == ResponseCode.SYSTEM_ERROR
            r = await call(RequestCode.UPDATE_CONTROLLER_CONFIG, {}, b"controllerBackend=etcd\n")
            assert r.code == ResponseCode.SYSTEM_ERROR and "controllerBackend" in (r.remark or "")
            r = await call(RequestCode.UPDATE_CONTROLLER_CONFIG, {}, b"configStorePath=/x\n")
            assert r.code == ResponseCode.NO_PERMISSION
            r = await call(
                RequestCode.UPDATE_CONTROLLER_CONFIG, {}, b"scanInactiveMasterInterval=x\n"
            )
            assert r.code == ResponseCode.SYSTEM_ERROR
            r = await call(
                RequestCode.UPDATE_CONTROLLER_CONFIG,
                {},
                b"scanInactiveMasterInterval=999999999999\n",
            )
            assert r.code == ResponseCode.SYSTEM_ERROR and "at most" in (r.remark or "")
            r = await call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, b"[" * 100_000)
            assert r.code == ResponseCode.SYSTEM_ERROR
            r = await call(9999, {})
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            r = await call(
                RequestCode.CLEAN_BROKER_DATA, CleanBrokerDataRequest("nobody", CLUSTER).to_ext()
            )
            assert r.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
            r = await call(
                RequestCode.UPDATE_CONTROLLER_CONFIG, {}, b"enableElectUncleanMaster=true\n"
            )
            assert (
                r.code == ResponseCode.SUCCESS
                and server.controller.config.enable_elect_unclean_master
            )
            r = await call(RequestCode.GET_CONTROLLER_CONFIG, {})
            assert b"enableElectUncleanMaster=true\n" in r.body
            r = await call(RequestCode.CONTROLLER_GET_METADATA_INFO, {})
            assert r.code == ResponseCode.SUCCESS
        finally:
            client.close()
            await server.shutdown()

    run(main)

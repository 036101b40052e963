"""Two controllers over one 3-member etcd cluster never both elect: every election is a
transaction on the group's revision made under the active controller's lease, so each master
epoch is handed out once, and epochs only grow, while requests go to both controllers at once,
while the etcd member the cluster follows is killed, and when the active controller is killed
(kill -9 of its process) and the other takes over. Skipped, saying so, without etcd."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.controller import (
    ControllerConfig,
    EtcdBackend,
    GroupRecord,
    LeadershipLostError,
    Member,
)
from rocketstore.protocol._controller_bodies import SyncStateSet
from rocketstore.protocol._controller_headers import GetReplicaInfoRequest
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode
from rocketstore.server import ControllerServer
from support.controllers import CLUSTER, FakeBroker, run, until
from support.etcd import EtcdCluster
from support.ports import free_port

PREFIX = "/rocketstore-etcd-test"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path / "etcd-cluster")
    (tmp_path / "etcd-cluster").mkdir()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def config(etcd: EtcdCluster, self_id: str) -> ControllerConfig:
    return ControllerConfig(
        listen_port=0,
        self_id=self_id,
        backend="etcd",
        etcd_endpoints=tuple(etcd.endpoints),
        etcd_prefix=PREFIX,
        lease_ttl_s=2,
        scan_not_active_broker_interval_ms=100,
        scan_inactive_master_interval_ms=100,
        broker_heartbeat_timeout_ms=1000,
    )


async def beat(brokers: list[FakeBroker], controllers: list[str]) -> None:
    """Heartbeats of every broker to every controller, as RocketMQ's brokers send them."""
    while True:
        for broker in brokers:
            for address in controllers:
                try:
                    await broker.heartbeat(epoch=1, max_offset=100, timeout_ms=30_000, to=address)
                except Exception:
                    pass  # a controller that is down
        await asyncio.sleep(0.2)


async def active_of(servers: list[ControllerServer]) -> ControllerServer:
    await until(
        lambda: sum(s.controller.active for s in servers) == 1, what="one active controller"
    )
    return next(s for s in servers if s.controller.active)


def test_a_controller_whose_lease_is_gone_cannot_write(etcd: EtcdCluster) -> None:
    """The fence itself: the active controller's lease revoked behind its back (as if it had
    been paused past its TTL); it still believes it leads, the other takes over, and etcd refuses
    the first one's write."""

    async def main() -> None:
        one = EtcdBackend(etcd.endpoints, "group1", prefix=PREFIX, ttl_s=30)
        two = EtcdBackend(etcd.endpoints, "group1", prefix=PREFIX, ttl_s=30)
        try:
            assert await one.take_leadership(Member("n0", "127.0.0.1:1"))
            record = GroupRecord(CLUSTER, "broker-a").with_replica(1, "a", "a;1").with_master(1)
            revision = await one.compare_and_set("broker-a", record, 0)
            assert revision is not None
            assert one._lease is not None
            await one.client.revoke(one._lease)
            assert one.holds_leadership()  # it does not know yet
            assert await two.take_leadership(Member("n1", "127.0.0.1:2"))
            with pytest.raises(LeadershipLostError):
                await one.compare_and_set("broker-a", record.with_master(1), revision)
            assert not one.holds_leadership()
            read = await two.read("broker-a")
            assert read is not None and read.record.master_epoch == 1
            assert await two.compare_and_set("broker-a", record.with_master(1), revision)
        finally:
            await one.close()
            await two.close()

    run(main)


def test_concurrent_elections_to_both_controllers_while_an_etcd_member_dies(
    etcd: EtcdCluster,
) -> None:
    async def main() -> None:
        servers = [ControllerServer(config(etcd, "n0")), ControllerServer(config(etcd, "n1"))]
        for server in servers:
            await server.start()
        addresses = [s.address for s in servers]
        active = await active_of(servers)
        a = await FakeBroker(active.address).start()
        b = await FakeBroker(active.address).start()
        beating = asyncio.create_task(beat([], addresses))
        try:
            await a.register()
            await b.register()
            beating.cancel()
            beating = asyncio.create_task(beat([a, b], addresses))
            await until(
                lambda: all(s.controller.live.is_alive(CLUSTER, "broker-a", 2) for s in servers)
            )
            assert (await a.elect()).code == ResponseCode.SUCCESS
            assert (await a.alter({1, 2}, master_epoch=1, set_epoch=1)).code == ResponseCode.SUCCESS

            brokers = {1: a, 2: b}
            won: list[tuple[str, int, int]] = []  # (controller, master epoch, new master)
            others: dict[str, int] = {}

            async def designate(target: int, address: str) -> None:
                try:
                    r = await a.elect(designate=True, broker_id=target, to=address)
                except Exception as exc:  # a call cut short by the member's death
                    others[type(exc).__name__] = others.get(type(exc).__name__, 0) + 1
                    return
                if r.code == ResponseCode.SUCCESS:
                    epoch = int(r.ext_fields["masterEpoch"])
                    won.append((address, epoch, int(r.ext_fields["masterBrokerId"])))
                else:
                    others[str(r.code)] = others.get(str(r.code), 0) + 1

            async def both_in_sync() -> int:
                """The master puts both brokers in the SyncStateSet; the master's id."""
                for _attempt in range(100):
                    try:
                        active = await active_of(servers)
                        r = await a.call(
                            RequestCode.CONTROLLER_GET_REPLICA_INFO,
                            GetReplicaInfoRequest("broker-a"), to=active.address,
                        )  # fmt: skip
                        if r.code == ResponseCode.SUCCESS:
                            master = int(r.ext_fields["masterBrokerId"])
                            state = SyncStateSet.decode(r.body)
                            if state.members == {1, 2}:
                                return master
                            broker = brokers[master]
                            broker.controller = active.address
                            await broker.alter(
                                {1, 2}, int(r.ext_fields["masterEpoch"]), state.epoch
                            )
                    except Exception:
                        pass  # etcd choosing a new leader: try again
                    await asyncio.sleep(0.1)
                raise AssertionError("the SyncStateSet never took both brokers again")

            for round_ in range(10):
                if round_ == 4:  # the member etcd's raft follows dies in the middle
                    leader = etcd.leader()
                    assert leader is not None
                    etcd.kill(leader)
                master = await both_in_sync()
                target = 3 - master
                # the same election asked of both controllers at once, three times each
                await asyncio.gather(*(designate(target, addresses[i % 2]) for i in range(6)))
            epochs = [epoch for _address, epoch, _master in won]
            assert len(epochs) == len(set(epochs)), f"one master epoch handed out twice: {won}"
            assert len(won) >= 8, (won, others)  # nearly every round elected once
            # the group's record holds the last of them: every success was one step up
            active = await active_of(servers)
            r = await a.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a"),
                to=active.address,
            )  # fmt: skip
            assert int(r.ext_fields["masterEpoch"]) == max(epochs) == 1 + len(won)
            assert sorted(epochs) == list(range(2, 2 + len(won)))
        finally:
            beating.cancel()
            await a.die()
            await b.die()
            for server in servers:
                await server.shutdown()

    run(main, timeout=120)


def _start_controller(
    tmp: Path, etcd: EtcdCluster, self_id: str
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port("127.0.0.1")
    conf = tmp / f"controller-{self_id}.conf"
    conf.write_text(
        "\n".join(
            [
                "controllerDLegerGroup=group1",
                f"controllerDLegerSelfId={self_id}",
                f"controllerListen=127.0.0.1:{port}",
                "controllerBackend=etcd",
                f"controllerEtcdEndpoints={','.join(etcd.endpoints)}",
                f"controllerEtcdPrefix={PREFIX}",
                "controllerLeaseTtl=2",
                "scanNotActiveBrokerInterval=100",
                "scanInactiveMasterInterval=100",
                "brokerHeartbeatTimeoutMills=1000",
            ]
        )
    )
    log = open(tmp / f"controller-{self_id}.out", "wb")  # noqa: SIM115 - the process owns it
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketstore.cli", "controller", "-c", str(conf),
         "--metrics-listen", "", "--log-dir", str(tmp / f"logs-{self_id}")],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    log.close()
    return proc, f"127.0.0.1:{port}"


def test_the_active_controller_killed_the_other_takes_over(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    addresses: dict[str, str] = {}
    for self_id in ("n0", "n1"):
        procs[self_id], addresses[self_id] = _start_controller(tmp_path, etcd, self_id)

    async def metadata(broker: FakeBroker, address: str) -> RemotingCommand | None:
        try:
            return await broker.call(RequestCode.CONTROLLER_GET_METADATA_INFO, to=address)
        except Exception:
            return None

    async def main() -> None:
        probe = await FakeBroker(addresses["n0"]).start()
        leader: dict[str, str] = {}

        async def find_leader(among: list[str]) -> str:
            for _ in range(300):
                for self_id in among:
                    meta = await metadata(probe, addresses[self_id])
                    if meta is not None and meta.ext_fields.get("isLeader") == "true":
                        leader["id"] = self_id
                        return self_id
                await asyncio.sleep(0.05)
            raise AssertionError(f"no active controller among {among}")

        first = await find_leader(["n0", "n1"])
        a = await FakeBroker(addresses[first]).start()
        b = await FakeBroker(addresses[first]).start()
        beating = asyncio.create_task(beat([a, b], list(addresses.values())))
        try:
            await a.register()
            await b.register()
            # the brokers' heartbeats reach the active controller: then it elects broker 1 and
            # takes broker 2 into the SyncStateSet (polled: a broker not heard from yet is
            # refused, "don't alive")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while (elected := await a.elect()).code != ResponseCode.SUCCESS:
                assert loop.time() < deadline, elected.remark
                await asyncio.sleep(0.1)
            while (altered := await a.alter({1, 2}, 1, 1)).code != ResponseCode.SUCCESS:
                assert loop.time() < deadline, altered.remark
                await asyncio.sleep(0.1)
            before = await a.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            epoch_before = int(before.ext_fields["masterEpoch"])

            procs[first].send_signal(signal.SIGKILL)
            procs[first].wait(timeout=10)
            other = "n1" if first == "n0" else "n0"
            assert await find_leader([other]) == other
            # the new active controller has the group as it was, and serves the brokers
            for broker in (a, b):
                broker.controller = addresses[other]
            r = await b.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert int(r.ext_fields["masterEpoch"]) == epoch_before
            # then the master dies: the new active controller elects broker 2, one epoch up
            b.notices.clear()
            await a.die()
            await until(
                lambda: any(n.ext_fields.get("masterBrokerId") == "2" for n in b.notices),
                timeout=60,
                what="broker 2 elected by the controller that took over",
            )
            r = await b.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            assert r.ext_fields["masterBrokerId"] == "2"
            assert int(r.ext_fields["masterEpoch"]) == epoch_before + 1
        finally:
            beating.cancel()
            await b.die()
            await probe.die()

    try:
        run(main, timeout=120)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)

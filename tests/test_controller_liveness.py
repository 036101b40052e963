"""Which brokers the controller counts alive when connections close, driven in the order the
event loop can run things (a manual clock, no sleeps): a heartbeat whose frame was read
together with its connection's end is handled after the close, and must not bring a broker
just found dead back to life for the election that follows."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rocketstore.controller import Controller, ControllerConfig, ControllerProcessor, FileBackend
from rocketstore.protocol._controller_bodies import SyncStateSet
from rocketstore.protocol._controller_headers import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerHeartbeatRequest,
    RegisterBrokerRequest,
)
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode
from rocketstore.store._clock import ManualClock
from support.controllers import CLUSTER, run

NAME = "broker-a"


class FakeConnection:
    """What the controller reads of a server connection: whether it has closed, its peer."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.closed = False


def beat(broker_id: int) -> RemotingCommand:
    header = BrokerHeartbeatRequest(
        CLUSTER, f"127.0.0.1:{30000 + broker_id}", NAME, broker_id, 1, 100, 100, 10_000
    )
    return RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, header.to_ext(), oneway=True)


async def group_of_two(controller: Controller) -> None:
    """Brokers 1 (master) and 2, both in the SyncStateSet."""
    requests = controller.requests
    for broker_id in (1, 2):
        address = f"127.0.0.1:{30000 + broker_id}"
        r = await requests.apply_broker_id(
            ApplyBrokerIdRequest(CLUSTER, NAME, broker_id, f"{address};1")
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await requests.register_broker(RegisterBrokerRequest(CLUSTER, NAME, broker_id, address))
        assert r.code == ResponseCode.SUCCESS, r.remark


def test_a_heartbeat_handled_after_its_connection_closed_revives_nobody(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        config = ControllerConfig(
            listen_port=0, store_path=str(tmp_path / "c"), notify_broker_role_changed=False
        )
        controller = Controller(config, FileBackend(tmp_path / "c"), clock=clock)
        await controller.start("127.0.0.1:1")
        try:
            processor = ControllerProcessor(controller)
            await group_of_two(controller)
            master, slave = FakeConnection("m"), FakeConnection("s")
            for conn, broker_id in ((master, 1), (slave, 2)):
                await processor.broker_heartbeat(beat(broker_id), conn)  # type: ignore[arg-type]
            r = await controller.requests.elect(NAME, 1, "broker")
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await controller.requests.alter_sync_state_set(
                AlterSyncStateSetRequest(NAME, 1, 1), SyncStateSet(frozenset({1, 2}), 1)
            )
            assert r.code == ResponseCode.SUCCESS, r.remark

            # the slave dies: its last heartbeat and the connection's end are read together;
            # the close is handled first (its listener runs at once), the heartbeat's handler
            # after it
            slave.closed = True
            controller.connection_closed(slave)
            assert not controller.live.is_alive(CLUSTER, NAME, 2)
            await processor.broker_heartbeat(beat(2), slave)  # type: ignore[arg-type]
            assert not controller.live.is_alive(CLUSTER, NAME, 2)

            # then the master dies: nobody of the SyncStateSet is alive, the group waits
            master.closed = True
            controller.connection_closed(master)
            while controller._elections:
                await asyncio.gather(*controller._elections)
            versioned = await controller.backend.read(NAME)
            assert versioned is not None
            record = versioned.record
            assert record.master_id is None, f"broker {record.master_id} elected while dead"
            assert record.master_epoch == 2  # the election happened and found nobody

            # the slave comes back on a new connection: alive again, and its request elects it
            again = FakeConnection("s2")
            await processor.broker_heartbeat(beat(2), again)  # type: ignore[arg-type]
            r = await controller.requests.elect(NAME, 2, "broker")
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.header is not None and r.header.to_ext()["masterBrokerId"] == "2"
        finally:
            await controller.stop()

    run(main)

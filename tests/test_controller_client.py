"""The broker side's client of the controllers (``ControllerClient``), over both backends: it
finds the active controller among the addresses it is given (a standby first), registers and
takes its role as a RocketMQ 5.1.4 broker does, beats to every controller, reports a refusal by
its code, and follows the leadership when the active controller stops."""

from __future__ import annotations

import pytest

from rocketstore.protocol._controller_bodies import SyncStateSet
from rocketstore.protocol._controller_client import ControllerClient, split_controller_addresses
from rocketstore.protocol._controller_headers import BrokerHeartbeatRequest
from rocketstore.protocol._errors import ControllerRefusedError, NoActiveControllerError
from rocketstore.remoting import ResponseCode
from support.controllers import CLUSTER, Backends, backends, etcd_cluster, run, until
from support.ports import free_port

__all__ = ["backends", "etcd_cluster"]  # fixtures


def test_a_broker_registers_and_follows_the_leadership(backends: Backends) -> None:
    async def main() -> None:
        active = backends.server("n0")
        await active.start()
        standby = backends.server("n1")
        await standby.start()
        client = ControllerClient(split_controller_addresses(f"{standby.address};{active.address}"))
        try:
            assert await client.find_leader() == active.address
            broker_id = await client.next_broker_id(CLUSTER, "broker-a")
            assert broker_id == 1
            await client.apply_broker_id(CLUSTER, "broker-a", 1, "127.0.0.1:30911;1")
            with pytest.raises(ControllerRefusedError) as refused:
                await client.apply_broker_id(CLUSTER, "broker-a", 1, "127.0.0.1:40911;2")
            assert refused.value.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
            header, state = await client.register(CLUSTER, "broker-a", 1, "127.0.0.1:30911")
            assert header.master_broker_id is None and state == SyncStateSet()
            beat = BrokerHeartbeatRequest(CLUSTER, "127.0.0.1:30911", "broker-a", 1, 0, 0)
            assert await client.heartbeat(beat) == []
            for server in (active, standby):  # the standby hears the broker too
                await until(lambda s=server: s.controller.live.is_alive(CLUSTER, "broker-a", 1))
            elected = await client.elect(CLUSTER, "broker-a", 1)
            assert elected.code == ResponseCode.SUCCESS
            assert (elected.header.master_broker_id, elected.header.master_epoch) == (1, 1)
            again = await client.elect(CLUSTER, "broker-a", 1)
            assert again.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
            info, state = await client.replica_info("broker-a")
            assert (info.master_broker_id, info.master_address) == (1, "127.0.0.1:30911")
            assert state == SyncStateSet(frozenset({1}), 1)
            with pytest.raises(ControllerRefusedError) as refused:  # a stale set epoch
                await client.alter_sync_state_set("broker-a", 1, 1, SyncStateSet(frozenset({1}), 0))
            assert refused.value.code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
            # the active controller stops: the client's next request finds the new one
            await active.shutdown()
            await until(lambda: standby.controller.active, what="the standby takes over")
            info, _state = await client.replica_info("broker-a")
            assert client.leader == standby.address and info.master_epoch == 1
        finally:
            client.close()
            await standby.shutdown()
            await active.shutdown()

    run(main)


def test_no_controller_to_be_found() -> None:
    async def main() -> None:
        client = ControllerClient([f"127.0.0.1:{free_port('127.0.0.1')}"], timeout=1.0)
        try:
            with pytest.raises(NoActiveControllerError):
                await client.next_broker_id(CLUSTER, "broker-a")
        finally:
            client.close()

    run(main)

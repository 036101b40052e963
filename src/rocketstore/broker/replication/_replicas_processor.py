"""The broker's answers to the controller-mode requests it serves (RocketMQ 5.1.4's
AdminBrokerProcessor):

- NOTIFY_BROKER_ROLE_CHANGED (1008), from a controller: the group's new master, its epoch and
  SyncStateSet (header NotifyBrokerRoleChangedRequestHeader, body SyncStateSet); the broker takes
  the role (``ReplicasManager.notify``) and answers SUCCESS;
- GET_BROKER_EPOCH_CACHE (1007), from mqadmin getBrokerEpoch: the epoch entries of this
  broker's log as EpochEntryCache JSON::

      {"brokerId":1,"brokerName":"broker-a","clusterName":"DefaultCluster",
       "epochList":[{"endOffset":720,"epoch":1,"startOffset":0},
                    {"endOffset":9223372036854775807,"epoch":2,"startOffset":720}],
       "maxOffset":1000}

A broker not in controller mode answers both with SYSTEM_ERROR. Loop thread.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ...protocol._controller_bodies import SyncStateSet
from ...protocol._controller_headers import NotifyBrokerRoleChangedRequest
from ...remoting import Connection, RemotingCommand, RequestCode, RequestError
from ...remoting import ResponseCode as RC
from ...remoting import _fastjson as fastjson
from ...store.ha._api import RoleSwitch
from ...store.ha._epoch import OPEN_END
from .._services import HasConfig, HasStore
from ._replicas import ReplicasManager

log = logging.getLogger(__name__)


class ReplicasContext(HasConfig, HasStore, Protocol):
    @property
    def replicas(self) -> ReplicasManager | None: ...


def epoch_entry_cache(
    cluster: str, broker_name: str, broker_id: int, ha: RoleSwitch, max_offset: int
) -> bytes:
    entries = ha.epochs.entries()
    epochs = []
    for i, e in enumerate(entries):
        end = entries[i + 1].start_offset if i + 1 < len(entries) else OPEN_END
        epochs.append({"endOffset": end, "epoch": e.epoch, "startOffset": e.start_offset})
    doc = {
        "brokerId": broker_id,
        "brokerName": broker_name,
        "clusterName": cluster,
        "epochList": epochs,
        "maxOffset": max_offset,
    }
    return fastjson.dumps(doc).encode("utf-8")


class ReplicasProcessor:
    def __init__(self, broker: ReplicasContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.notify_role_changed,
            RequestCode.GET_BROKER_EPOCH_CACHE: self.epoch_cache,
        }

    async def notify_role_changed(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        replicas = self.broker.replicas
        if replicas is None:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, "this broker is not in controller mode"
            )
        header = NotifyBrokerRoleChangedRequest.from_ext(cmd.ext_fields)
        try:
            sset = SyncStateSet.decode(cmd.body) if cmd.body else SyncStateSet()
        except RequestError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
        log.info(
            "%s: the controller at %s says master %s (%s), epoch %s, SyncStateSet %s",
            self.broker.config.broker_name,
            conn.peer,
            header.master_broker_id,
            header.master_address,
            header.master_epoch,
            sorted(sset.members),
        )
        await replicas.notify(
            header.master_broker_id, header.master_address, header.master_epoch, sset
        )
        return RemotingCommand.response(RC.SUCCESS)

    def epoch_cache(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        store = self.broker.store
        ha = store.ha.switch
        replicas = self.broker.replicas
        if replicas is None or ha is None:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, "this broker is not in controller mode"
            )
        config = self.broker.config
        broker_id = 0 if replicas.role == "MASTER" else replicas.broker_id
        body = epoch_entry_cache(
            config.cluster_name, config.broker_name, broker_id, ha, store.max_phy_offset
        )
        return RemotingCommand.response(RC.SUCCESS, None, {}, body)

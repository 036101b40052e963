"""The controller's request handlers (RocketMQ 5.1.4's ControllerRequestProcessor): each decodes
its header and body (``protocol._controller_headers``, ``_controller_bodies``), asks the
``Controller``, and answers with the outcome's code, remark, header and body.

=====  ================================  ==========================================================
code   request                           answer
=====  ================================  ==========================================================
1012   CONTROLLER_GET_NEXT_BROKER_ID     header nextBrokerId
1013   CONTROLLER_APPLY_BROKER_ID        SUCCESS, or 2014 BROKER_ID_INVALID
1003   CONTROLLER_REGISTER_BROKER        header master*, body SyncStateSet; or 2010
1002   CONTROLLER_ELECT_MASTER           header master*, body ElectMasterResponseBody; or 2011
                                         MASTER_STILL_EXIST, 2012 ELECT_MASTER_FAILED, 2010
1001   CONTROLLER_ALTER_SYNC_STATE_SET   header newSyncStateSetEpoch, body SyncStateSet; or
                                         2000 / 2001 (fenced), 2002, 2003, 2006, 2013
1004   CONTROLLER_GET_REPLICA_INFO       header master*, body SyncStateSet; or 2008
1006   CONTROLLER_GET_SYNC_STATE_DATA    body BrokerReplicasInfo of the names in the body
1005   CONTROLLER_GET_METADATA_INFO      header group, controllerLeaderId / Address, isLeader,
                                         peers (any controller answers it)
 904   BROKER_HEARTBEAT (one-way)        "Heart beat success"; no brokerId: 2005 INVALID_REQUEST
1011   CLEAN_BROKER_DATA                 SUCCESS, or 2009 INVALID_CLEAN_BROKER_METADATA
1009   UPDATE_CONTROLLER_CONFIG          properties body; only the settings that can change
                                         while running (``RUNTIME_KEYS``); configStorePath:
                                         NO_PERMISSION; any other key SYSTEM_ERROR, nothing
                                         applied
1010   GET_CONTROLLER_CONFIG             ``key=value`` lines of every setting
=====  ================================  ==========================================================

With ACL on (``--acl-file``), every request is checked by the controller's rules of the
authorisation table (``rocketstore.acl._table.CONTROLLER``): whatever changes a broker group's
state (registration, broker ids, the SyncStateSet, elections, heartbeats, cleaning) or the
settings needs an admin account (a broker signs with its inner account), the reads any signed
account.

Every request but 1005 and 904 is answered 2007 CONTROLLER_NOT_LEADER by a controller that is
not the active one. A header field missing or not a number, or a body that does not decode, is
answered SYSTEM_ERROR with the reason; the state backend out of reach likewise ("controller
state unavailable: ..."). Handlers run on the controller's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ..protocol._controller_bodies import SyncStateSet, decode_broker_names
from ..protocol._controller_headers import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerHeartbeatRequest,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetNextBrokerIdRequest,
    GetReplicaInfoRequest,
    RegisterBrokerRequest,
)
from ..protocol._properties import PropertiesError, format_properties, parse_properties
from ..remoting import (
    Connection,
    Handler,
    RemotingCommand,
    RequestCode,
    RequestError,
    ResponseCode,
)
from ._config import RUNTIME_KEYS, ControllerConfig
from ._controller import Controller
from ._errors import BackendError, ControllerConfigError
from ._replicas import Outcome

log = logging.getLogger(__name__)

NO_CONFIG_PATH = "Can not update config path"


def answer(outcome: Outcome) -> RemotingCommand:
    ext = outcome.header.to_ext() if outcome.header is not None else None
    return RemotingCommand.response(outcome.code, outcome.remark, ext, outcome.body)


class ControllerProcessor:
    """Serves the controller's request codes from a :class:`Controller`."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def handlers(self) -> dict[int, Handler]:
        """Request code → handler, for a RemotingServer."""
        table: dict[int, Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]] = {
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self.get_next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.get_metadata_info,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.CLEAN_BROKER_DATA: self.clean_broker_data,
            RequestCode.UPDATE_CONTROLLER_CONFIG: self.update_config,
            RequestCode.GET_CONTROLLER_CONFIG: self.get_config,
        }
        return {int(code): self._counted(int(code), fn) for code, fn in table.items()}

    def _counted(
        self, code: int, fn: Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]
    ) -> Handler:
        stats = self.controller.stats

        async def handle(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
            try:
                response = await fn(cmd, conn)
            except BackendError as exc:
                stats.request(code, ok=False)
                raise RequestError(f"controller state unavailable: {exc}") from None
            except BaseException:
                stats.request(code, ok=False)
                raise
            stats.request(code, ok=True)
            return response

        return handle

    # ---- registration and elections -------------------------------------------------------------

    async def get_next_broker_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = GetNextBrokerIdRequest.from_ext(cmd.ext_fields)
        return answer(await self.controller.requests.next_broker_id(req))

    async def apply_broker_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = ApplyBrokerIdRequest.from_ext(cmd.ext_fields)
        return answer(await self.controller.requests.apply_broker_id(req))

    async def register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = RegisterBrokerRequest.from_ext(cmd.ext_fields)
        return answer(await self.controller.requests.register_broker(req))

    async def elect_master(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = ElectMasterRequest.from_ext(cmd.ext_fields)
        if req.designate_elect:
            log.warning(
                "controller: %s designates broker %s of group %s as master",
                conn.peer,
                req.broker_id,
                req.broker_name,
            )
        return answer(await self.controller.requests.elect_master(req))

    async def alter_sync_state_set(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = AlterSyncStateSetRequest.from_ext(cmd.ext_fields)
        proposed = SyncStateSet.decode(cmd.body)
        return answer(await self.controller.requests.alter_sync_state_set(req, proposed))

    async def get_replica_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = GetReplicaInfoRequest.from_ext(cmd.ext_fields)
        return answer(await self.controller.requests.replica_info(req))

    async def get_sync_state_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        names = decode_broker_names(cmd.body)
        if not names:  # RocketMQ answers an empty request with an empty SUCCESS
            return RemotingCommand.response(ResponseCode.SUCCESS)
        return answer(await self.controller.requests.sync_state_data(names))

    async def get_metadata_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = await self.controller.metadata()
        return RemotingCommand.response(ResponseCode.SUCCESS, None, header.to_ext())

    async def broker_heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = BrokerHeartbeatRequest.from_ext(cmd.ext_fields)
        if req.broker_id is None:
            return RemotingCommand.response(
                ResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId"
            )
        self.controller.heartbeat(req, conn)
        return RemotingCommand.response(ResponseCode.SUCCESS, "Heart beat success")

    # ---- administration -------------------------------------------------------------------------

    async def clean_broker_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = CleanBrokerDataRequest.from_ext(cmd.ext_fields)
        log.warning(
            "controller: %s asks to clean the data of group %s (brokers %s, living too: %s)",
            conn.peer,
            req.broker_name,
            req.broker_controller_ids_to_clean or "all",
            req.is_clean_living_broker,
        )
        return answer(await self.controller.requests.clean_broker_data(req))

    async def update_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if not cmd.body:
            return RemotingCommand.response(ResponseCode.SUCCESS)
        try:
            values = parse_properties(cmd.body)
        except PropertiesError as exc:
            raise RequestError(f"string2Properties error: {exc}") from None
        if "configStorePath" in values:
            return RemotingCommand.response(ResponseCode.NO_PERMISSION, NO_CONFIG_PATH)
        fixed = sorted(values.keys() - RUNTIME_KEYS)
        if fixed:
            raise RequestError(
                f"cannot change {', '.join(fixed)} while the controller runs (only "
                f"{', '.join(sorted(RUNTIME_KEYS))}); set them at start"
            )
        try:
            config = ControllerConfig.from_properties(values, self.controller.config)
        except ControllerConfigError as exc:
            raise RequestError(str(exc)) from None
        self.controller.update_config(config)
        log.warning("controller: config updated by %s: %s", conn.peer, values)
        return RemotingCommand.response(ResponseCode.SUCCESS)

    async def get_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        text = format_properties(self.controller.config.to_properties())
        return RemotingCommand.response(ResponseCode.SUCCESS, None, None, text.encode("utf-8"))

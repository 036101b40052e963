"""A client of RocketMQ 5's controllers on asyncio: what a broker in controller mode sends them
(RocketMQ 5.1.4's BrokerOuterAPI controller calls), over the project's remoting client.

``addresses`` are the controllers a broker is given (``controllerAddr``, ``a;b;c``). Requests go
to the active controller, found by asking each address for GET_METADATA_INFO; an answer
CONTROLLER_NOT_LEADER, or an active controller out of reach, makes the client find it again and
send the request once more. Heartbeats go to every address (standbys keep their own view of
which brokers are alive, ready to take over).

A refusal raises ``ControllerRefusedError`` with the controller's code and remark, but for the
answers that are outcomes rather than failures: ELECT_MASTER's MASTER_STILL_EXIST (the master
is in the header) and ELECT_MASTER_FAILED / MASTER_NOT_AVAILABLE (no master now), returned as
``Elected`` with the code. No active controller: ``NoActiveControllerError``.

Loop thread. Imports nothing of the controller's server side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..remoting import (
    AsyncRemotingClient,
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
)
from ..remoting._client import FROM_ENV, Signer
from ._controller_bodies import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    SyncStateSet,
    encode_broker_names,
)
from ._controller_headers import (
    AlterSyncStateSetRequest,
    AlterSyncStateSetResponse,
    ApplyBrokerIdRequest,
    BrokerHeartbeatRequest,
    ElectMasterRequest,
    ElectMasterResponse,
    GetMetaDataResponse,
    GetNextBrokerIdRequest,
    GetNextBrokerIdResponse,
    GetReplicaInfoRequest,
    GetReplicaInfoResponse,
    Header,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
)
from ._errors import ControllerRefusedError, NoActiveControllerError

ELECTION_OUTCOMES = frozenset(
    {
        int(ResponseCode.SUCCESS),
        int(ResponseCode.CONTROLLER_MASTER_STILL_EXIST),
        int(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED),
        int(ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE),
    }
)


@dataclass(frozen=True, slots=True)
class Elected:
    """ELECT_MASTER's answer: ``code`` SUCCESS (a new master), MASTER_STILL_EXIST (the master
    kept), ELECT_MASTER_FAILED or MASTER_NOT_AVAILABLE (none)."""

    code: int
    header: ElectMasterResponse
    body: ElectMasterResponseBody | None


def split_controller_addresses(text: str) -> list[str]:
    """``a:1;b:2`` (RocketMQ's controllerAddr) → the addresses."""
    return [part.strip() for part in text.split(";") if part.strip()]


class ControllerClient:
    def __init__(
        self,
        addresses: Sequence[str],
        *,
        client: AsyncRemotingClient | None = None,
        timeout: float = 3.0,
        signer: Signer | None = FROM_ENV,
    ) -> None:
        """``signer`` signs every request when the controllers check ACL (a broker's: its
        inner account; default: ROCKETSTORE_ACCESS_KEY's account, if any)."""
        if not addresses:
            raise ValueError("no controller address")
        self.addresses = list(addresses)
        self.client = client if client is not None else AsyncRemotingClient(signer=signer)
        self.timeout = timeout
        self.leader: str | None = None  # the active controller as last found

    def close(self) -> None:
        self.client.close()

    async def metadata(self, address: str) -> GetMetaDataResponse:
        cmd = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
        response = await self.client.invoke(address, cmd, self.timeout)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerRefusedError(response.code, response.remark)
        return GetMetaDataResponse.from_ext(response.ext_fields)

    async def find_leader(self) -> str:
        """The active controller's address, asked of each address in turn. When every
        controller's ACL refused the question, that refusal is raised (ControllerRefusedError,
        ``access_denied``): the controllers are there, the account is what is wrong."""
        reasons = []
        denied: ControllerRefusedError | None = None
        for address in self.addresses:
            try:
                meta = await self.metadata(address)
            except ControllerRefusedError as exc:
                reasons.append(f"{address}: {exc}")
                if exc.access_denied:
                    denied = denied or exc
                continue
            except RemotingError as exc:
                reasons.append(f"{address}: {exc}")
                continue
            if meta.controller_leader_address:
                self.leader = meta.controller_leader_address
                return self.leader
            reasons.append(f"{address}: knows no active controller")
        self.leader = None
        if denied is not None and len(reasons) == sum("ACL refused" in r for r in reasons):
            raise denied
        raise NoActiveControllerError("; ".join(reasons))

    async def request(
        self, code: int, header: Header | None = None, body: bytes = b""
    ) -> RemotingCommand:
        """Send to the active controller (found again, and sent once more, when the one known
        is not active any more or cannot be reached); its answer, whatever the code."""
        ext = header.to_ext() if header is not None else {}
        for attempt in range(2):
            leader = self.leader if self.leader is not None else await self.find_leader()
            try:
                response = await self.client.invoke(
                    leader, RemotingCommand.request(code, dict(ext), body), self.timeout
                )
            except RemotingError:
                self.leader = None
                if attempt:
                    raise
                continue
            if response.code == ResponseCode.CONTROLLER_NOT_LEADER and not attempt:
                self.leader = None
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ok(
        self, code: int, header: Header | None = None, body: bytes = b""
    ) -> RemotingCommand:
        response = await self.request(code, header, body)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerRefusedError(response.code, response.remark)
        return response

    # ---- registration -----------------------------------------------------------------------

    async def next_broker_id(self, cluster: str, broker_name: str) -> int:
        r = await self._ok(
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequest(cluster, broker_name)
        )
        next_id = GetNextBrokerIdResponse.from_ext(r.ext_fields).next_broker_id
        if next_id is None:
            raise ControllerRefusedError(r.code, "no nextBrokerId in the answer")
        return next_id

    async def apply_broker_id(
        self, cluster: str, broker_name: str, broker_id: int, check_code: str
    ) -> None:
        """Take ``broker_id`` (``check_code``: "brokerAddr;timestampMillis");
        ControllerRefusedError (BROKER_ID_INVALID) when another broker has it."""
        header = ApplyBrokerIdRequest(cluster, broker_name, broker_id, check_code)
        await self._ok(RequestCode.CONTROLLER_APPLY_BROKER_ID, header)

    async def register(
        self, cluster: str, broker_name: str, broker_id: int, address: str
    ) -> tuple[RegisterBrokerResponse, SyncStateSet]:
        header = RegisterBrokerRequest(cluster, broker_name, broker_id, address)
        r = await self._ok(RequestCode.CONTROLLER_REGISTER_BROKER, header)
        state = SyncStateSet.decode(r.body) if r.body else SyncStateSet()
        return RegisterBrokerResponse.from_ext(r.ext_fields), state

    # ---- roles ------------------------------------------------------------------------------

    async def elect(
        self, cluster: str, broker_name: str, broker_id: int, *, designate: bool = False
    ) -> Elected:
        header = ElectMasterRequest(cluster, broker_name, broker_id, designate)
        r = await self.request(RequestCode.CONTROLLER_ELECT_MASTER, header)
        if r.code not in ELECTION_OUTCOMES:
            raise ControllerRefusedError(r.code, r.remark)
        body = ElectMasterResponseBody.decode(r.body) if r.body else None
        return Elected(r.code, ElectMasterResponse.from_ext(r.ext_fields), body)

    async def replica_info(self, broker_name: str) -> tuple[GetReplicaInfoResponse, SyncStateSet]:
        r = await self._ok(
            RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest(broker_name)
        )
        state = SyncStateSet.decode(r.body) if r.body else SyncStateSet()
        return GetReplicaInfoResponse.from_ext(r.ext_fields), state

    async def replicas(self, broker_name: str) -> frozenset[int]:
        """The ids of the group's replicas the controller knows (in the SyncStateSet or not):
        GET_SYNC_STATE_DATA. Empty when it knows no such group."""
        r = await self._ok(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=encode_broker_names([broker_name])
        )
        info = BrokerReplicasInfo.decode(r.body).table.get(broker_name) if r.body else None
        if info is None:
            return frozenset()
        return frozenset(
            r.broker_id
            for r in (*info.in_sync_replicas, *info.not_in_sync_replicas)
            if r.broker_id is not None
        )

    async def alter_sync_state_set(
        self, broker_name: str, master_id: int, master_epoch: int, proposed: SyncStateSet
    ) -> SyncStateSet:
        """The master's new SyncStateSet (``proposed.epoch``: the epoch it replaces); the set
        as stored, with its new epoch. ControllerRefusedError when fenced (2000 / 2001), for
        another master (2002), an unknown or dead replica (2003 / 2006) or no change (2013)."""
        header = AlterSyncStateSetRequest(broker_name, master_id, master_epoch)
        r = await self._ok(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, proposed.encode())
        if r.body:
            return SyncStateSet.decode(r.body)
        epoch = AlterSyncStateSetResponse.from_ext(r.ext_fields).new_sync_state_set_epoch
        return SyncStateSet(proposed.members, epoch)

    async def heartbeat(self, header: BrokerHeartbeatRequest) -> list[str]:
        """BROKER_HEARTBEAT (one-way) to every controller; the addresses it could not reach."""
        missed = []
        for address in self.addresses:
            cmd = RemotingCommand.request(
                RequestCode.BROKER_HEARTBEAT, header.to_ext(), oneway=True
            )
            try:
                await self.client.invoke_oneway(address, cmd)
            except RemotingError:
                missed.append(address)
        return missed

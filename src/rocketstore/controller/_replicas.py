"""What each controller request does to a group's record: RocketMQ 5.1.4's
ReplicasInfoManager, as pure functions from (request, the group's record as read) to an
``Outcome``: the answer (code, remark, header, body) and the record to store (or the group to
delete), which the caller writes with a compare-and-set on the revision it read.

Answers, as RocketMQ gives them::

    GET_NEXT_BROKER_ID   the group's next id (1 for a group nobody registered)
    APPLY_BROKER_ID      the id taken by the broker whose check code ("addr;millis") applies
                         for it (again: the same check code); a taken id, a first id other
                         than 1, or a group of MAX_REPLICAS already: BROKER_ID_INVALID
    REGISTER_BROKER      the master (when alive) and the SyncStateSet; the broker's new
                         address recorded; an unknown group or id: BROKER_NEED_TO_BE_REGISTERED
    ELECT_MASTER         the first election of a group makes the asking broker master; later
                         ones follow the elect policy (``_elect``); the master unchanged:
                         MASTER_STILL_EXIST; nobody electable: ELECT_MASTER_FAILED, or when
                         the controller asked (its master died) MASTER_NOT_AVAILABLE and the
                         group left without a master (the master epoch one more)
    ALTER_SYNC_STATE_SET the master's new set, fenced: the same set or one without the
                         master: ALTER_SYNC_STATE_SET_FAILED; another master: INVALID_MASTER;
                         another master epoch: FENCED_MASTER_EPOCH; another set epoch:
                         FENCED_SYNC_STATE_SET_EPOCH; an unknown replica: INVALID_REPLICAS;
                         one not alive: BROKER_NOT_ALIVE
    GET_REPLICA_INFO     the master and the SyncStateSet (BROKER_METADATA_NOT_EXIST)
    CLEAN_BROKER_DATA    the group (or the listed ids) forgotten, refused while they live
                         unless ``isCleanLivingBroker`` (INVALID_CLEAN_BROKER_METADATA)

Pure functions; any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..protocol._controller_bodies import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from ..protocol._controller_headers import (
    AlterSyncStateSetRequest,
    AlterSyncStateSetResponse,
    ApplyBrokerIdRequest,
    ApplyBrokerIdResponse,
    CleanBrokerDataRequest,
    ElectMasterResponse,
    GetNextBrokerIdRequest,
    GetNextBrokerIdResponse,
    GetReplicaInfoResponse,
    Header,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    require,
)
from ..remoting import ResponseCode
from ._elect import elect
from ._heartbeat import BrokerLive
from ._record import FIRST_BROKER_ID, GroupRecord

Alive = Callable[[int], bool]
LiveInfo = Callable[[int], BrokerLive | None]

MAX_REPLICAS = 256  # brokers one group may have (a client applying for ids without end is refused)

# how an election ended (RocketMQ's ElectionResult, the election_total metric's label)
NEW_MASTER_ELECTED = "new_master_elected"
KEEP_CURRENT_MASTER = "keep_current_master"
NO_MASTER_ELECTED = "no_master_elected"

# who asked for an election
BY_BROKER = "broker"
BY_ADMIN = "admin"
BY_CONTROLLER = "controller"


@dataclass(frozen=True, slots=True)
class Election:
    """One ELECT_MASTER's result, for the log, the metrics and the brokers' notices."""

    cluster: str
    broker_name: str
    trigger: str  # BY_BROKER, BY_ADMIN, BY_CONTROLLER
    result: str  # NEW_MASTER_ELECTED, KEEP_CURRENT_MASTER, NO_MASTER_ELECTED
    old_master: int | None
    new_master: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    members: Mapping[int, str]  # the group's replicas: id → address


@dataclass(frozen=True, slots=True)
class Outcome:
    """A request's answer, and what to store: ``record`` (None: nothing) or ``delete``."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: Header | None = None
    body: bytes = b""
    record: GroupRecord | None = None
    delete: bool = False
    election: Election | None = None

    @property
    def writes(self) -> bool:
        return self.record is not None or self.delete


def refused(code: int, remark: str) -> Outcome:
    return Outcome(code=code, remark=remark)


# ---- registration -----------------------------------------------------------------------------


def next_broker_id(req: GetNextBrokerIdRequest, record: GroupRecord | None) -> Outcome:
    next_id = FIRST_BROKER_ID if record is None else record.next_broker_id
    return Outcome(header=GetNextBrokerIdResponse(req.cluster_name, req.broker_name, next_id))


def apply_broker_id(req: ApplyBrokerIdRequest, record: GroupRecord | None) -> Outcome:
    cluster = require(req.cluster_name, "clusterName")
    broker_name = require(req.broker_name, "brokerName")
    broker_id = require(req.applied_broker_id, "appliedBrokerId")
    check_code = require(req.register_check_code, "registerCheckCode")
    address = check_code.split(";")[0]
    header = ApplyBrokerIdResponse(cluster, broker_name)
    if record is None:
        if broker_id != FIRST_BROKER_ID:
            return refused(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"Broker-set: {broker_name} hasn't been registered in controller, but broker "
                f"try to apply brokerId: {broker_id}",
            )
        new = GroupRecord(cluster, broker_name).with_replica(broker_id, address, check_code)
        return Outcome(header=header, record=new)
    replica = record.replicas.get(broker_id)
    if replica is None:
        if len(record.replicas) >= MAX_REPLICAS:
            return refused(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"Broker-set: {broker_name} has {len(record.replicas)} brokers, the most a "
                "group may have; clean the ones that are gone",
            )
        return Outcome(header=header, record=record.with_replica(broker_id, address, check_code))
    if replica.check_code == check_code:
        return Outcome(header=header)  # applied before by the same broker
    return refused(
        ResponseCode.CONTROLLER_BROKER_ID_INVALID,
        f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}",
    )


def register_broker(
    req: RegisterBrokerRequest, record: GroupRecord | None, alive: Alive
) -> Outcome:
    broker_name = require(req.broker_name, "brokerName")
    broker_id = require(req.broker_id, "brokerId")
    address = require(req.broker_address, "brokerAddress")
    if record is None:
        return refused(
            ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            f"Broker-set: {broker_name} hasn't been registered in controller",
        )
    if broker_id not in record.replicas:
        return refused(
            ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}",
        )
    header = RegisterBrokerResponse(req.cluster_name, broker_name)
    master = record.master_id
    if master is not None and alive(master):
        header = RegisterBrokerResponse(
            req.cluster_name,
            broker_name,
            master,
            record.address_of(master),
            record.master_epoch,
            record.sync_state_set_epoch,
        )
    body = SyncStateSet(record.sync_state_set, record.sync_state_set_epoch).encode()
    changed = None
    if record.address_of(broker_id) != address:
        changed = record.with_address(broker_id, address)
    return Outcome(header=header, body=body, record=changed)


# ---- elections --------------------------------------------------------------------------------


def elect_master(
    record: GroupRecord | None,
    broker_id: int | None,
    *,
    trigger: str,
    alive: Alive,
    live_info: LiveInfo,
    unclean: bool,
) -> Outcome:
    """ELECT_MASTER for the group ``record``: asked by a broker (``broker_id`` its own), by an
    administrator (``broker_id`` the one designated) or by the controller (``broker_id`` None:
    its master died)."""
    if record is None:
        return refused(
            ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered"
        )
    old = record.master_id
    new: int | None = None
    if record.never_had_master and broker_id is not None and broker_id in record.replicas:
        new = broker_id  # the group's first election: the broker that asks
    if new is None:
        new = elect(
            record.sync_state_set,
            record.replicas.keys() if unclean else None,
            alive=alive,
            live_info=live_info,
            old_master=old,
            prefer=broker_id if trigger == BY_ADMIN else None,
        )

    def election(result: str, after: GroupRecord) -> Election:
        return Election(
            record.cluster_name,
            record.broker_name,
            trigger,
            result,
            old,
            after.master_id,
            after.master_address,
            after.master_epoch,
            after.sync_state_set,
            after.sync_state_set_epoch,
            record.addresses(),
        )

    if new is not None and new == old:
        return Outcome(
            code=ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
            remark=f"The old master {old} is still alive, not need to elect new master for "
            f"broker {record.broker_name}",
            header=ElectMasterResponse(
                old, record.address_of(old), record.master_epoch, record.sync_state_set_epoch
            ),
            body=ElectMasterResponseBody(None, record.sync_state_set).encode(),
            election=election(KEEP_CURRENT_MASTER, record),
        )
    if new is not None:
        after = record.with_master(new)
        group = BrokerMemberGroup(record.cluster_name, record.broker_name, record.addresses())
        return Outcome(
            header=ElectMasterResponse(
                new, after.master_address, after.master_epoch, after.sync_state_set_epoch
            ),
            body=ElectMasterResponseBody(group, after.sync_state_set).encode(),
            record=after,
            election=election(NEW_MASTER_ELECTED, after),
        )
    if trigger == BY_CONTROLLER:
        after = record.with_master(None)
        return Outcome(
            code=ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
            remark="Old master has down and failed to elect a new broker master",
            record=after,
            election=election(NO_MASTER_ELECTED, after),
        )
    return Outcome(
        code=ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
        remark="Failed to elect a new master",
        election=election(NO_MASTER_ELECTED, record),
    )


def needs_election(record: GroupRecord, alive: Alive) -> bool:
    """The group has a master that is not alive and at least one replica that is."""
    master = record.master_id
    return master is not None and not alive(master) and any(alive(i) for i in record.replicas)


def alter_sync_state_set(
    req: AlterSyncStateSetRequest, proposed: SyncStateSet, record: GroupRecord | None, alive: Alive
) -> Outcome:
    master_id = require(req.master_broker_id, "masterBrokerId")
    master_epoch = require(req.master_epoch, "masterEpoch")
    if record is None:
        return refused(
            ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed"
        )
    members = proposed.members
    if members == record.sync_state_set:
        return refused(
            ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
            "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet",
        )
    if record.master_id is None or record.master_id != master_id:
        return refused(
            ResponseCode.CONTROLLER_INVALID_MASTER,
            "Rejecting alter syncStateSet request because the current leader is:"
            f"{{{record.master_id}}}, not {{{master_id}}}",
        )
    if master_epoch != record.master_epoch:
        return refused(
            ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
            "Rejecting alter syncStateSet request because the current master epoch is:"
            f"{{{record.master_epoch}}}, not {{{master_epoch}}}",
        )
    if proposed.epoch != record.sync_state_set_epoch:
        return refused(
            ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            "Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
            f"{{{record.sync_state_set_epoch}}}, not {{{proposed.epoch}}}",
        )
    for replica in sorted(members):
        if replica not in record.replicas:
            return refused(
                ResponseCode.CONTROLLER_INVALID_REPLICAS,
                f"Rejecting alter syncStateSet request because the replicas {{{replica}}} "
                "don't exist",
            )
        if not alive(replica):
            return refused(
                ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                f"Rejecting alter syncStateSet request because the replicas {{{replica}}} "
                "don't alive",
            )
    if record.master_id not in members:
        return refused(
            ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
            "Rejecting alter syncStateSet request because the newSyncStateSet don't contains "
            f"origin leader {{{record.master_id}}}",
        )
    after = record.with_sync_state_set(members)
    return Outcome(
        header=AlterSyncStateSetResponse(after.sync_state_set_epoch),
        body=SyncStateSet(after.sync_state_set, after.sync_state_set_epoch).encode(),
        record=after,
    )


# ---- reads ------------------------------------------------------------------------------------


def replica_info(record: GroupRecord | None) -> Outcome:
    if record is None:
        return refused(
            ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed"
        )
    return Outcome(
        header=GetReplicaInfoResponse(record.master_id, record.master_address, record.master_epoch),
        body=SyncStateSet(record.sync_state_set, record.sync_state_set_epoch).encode(),
    )


def replicas_info(record: GroupRecord, alive: Alive) -> ReplicasInfo:
    in_sync: list[ReplicaIdentity] = []
    not_in_sync: list[ReplicaIdentity] = []
    for broker_id, replica in record.replicas.items():
        identity = ReplicaIdentity(record.broker_name, broker_id, replica.address, alive(broker_id))
        (in_sync if broker_id in record.sync_state_set else not_in_sync).append(identity)
    return ReplicasInfo(
        record.master_id,
        record.master_address,
        record.master_epoch,
        record.sync_state_set_epoch,
        tuple(in_sync),
        tuple(not_in_sync),
    )


def sync_state_data(
    records: Mapping[str, GroupRecord], alive_of: Callable[[GroupRecord], Alive]
) -> Outcome:
    """GET_SYNC_STATE_DATA over the named groups the controller knows (``records``)."""
    table = {name: replicas_info(r, alive_of(r)) for name, r in records.items()}
    return Outcome(body=BrokerReplicasInfo(table).encode())


# ---- administration ---------------------------------------------------------------------------


def parse_broker_ids(text: str) -> frozenset[int]:
    """``1;2;3`` → the ids; ValueError for anything else."""
    return frozenset(int(part) for part in text.split(";"))


def clean_broker_data(
    req: CleanBrokerDataRequest, record: GroupRecord | None, alive: Alive
) -> Outcome:
    broker_name = req.broker_name
    ids_text = (req.broker_controller_ids_to_clean or "").strip()
    ids: frozenset[int] | None = None
    if ids_text:
        try:
            ids = parse_broker_ids(ids_text)
        except ValueError as exc:
            return refused(
                ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                "Please set the option <brokerControllerIdsToClean> according to the format, "
                f"exception: {exc}",
            )
    if not req.is_clean_living_broker:
        if ids is None and record is not None and record.master_id is not None:
            return refused(
                ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                f"Broker {broker_name} is still alive, clean up failure",
            )
        for broker_id in sorted(ids or ()):
            if alive(broker_id):
                return refused(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"Broker [{broker_name},  {broker_id}] is still alive, clean up failure",
                )
    if record is None:
        return refused(
            ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
            f"Broker {broker_name} is not existed,clean broker data failure.",
        )
    if ids is None:
        return Outcome(delete=True)
    after = record.without_replicas(ids)
    if after.master_id is not None and after.master_id in ids:
        after = after.with_master(None)  # its master forgotten: the group has none now
    if not after.replicas or not after.sync_state_set:
        return Outcome(delete=True)
    return Outcome(record=after)

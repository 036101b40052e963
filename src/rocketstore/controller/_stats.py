"""The controller's counters (RocketMQ 5.1.4's controller metrics: role, requests by type and
outcome, elections by result) and their frozen snapshot for the metrics endpoint.

Loop thread (counted as requests are served); ``snapshot`` from the same thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..remoting import RequestCode

# RocketMQ's request_type label: the lower-case name of its ControllerMetricsConstant.RequestType
_REQUEST_TYPES: dict[int, str] = {
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: "controller_alter_sync_state_set",
    RequestCode.CONTROLLER_ELECT_MASTER: "controller_elect_master",
    RequestCode.CONTROLLER_REGISTER_BROKER: "controller_register_broker",
    RequestCode.CONTROLLER_GET_REPLICA_INFO: "controller_get_replica_info",
    RequestCode.CONTROLLER_GET_METADATA_INFO: "controller_get_metadata_info",
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: "controller_get_sync_state_data",
    RequestCode.BROKER_HEARTBEAT: "controller_broker_heartbeat",
    RequestCode.UPDATE_CONTROLLER_CONFIG: "controller_update_controller_config",
    RequestCode.GET_CONTROLLER_CONFIG: "controller_get_controller_config",
    RequestCode.CLEAN_BROKER_DATA: "controller_clean_broker_data",
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: "controller_get_next_broker_id",
    RequestCode.CONTROLLER_APPLY_BROKER_ID: "controller_apply_broker_id",
}
SUCCESS = "success"
FAILED = "failed"


def request_type(code: int) -> str:
    return _REQUEST_TYPES.get(code, str(code))


@dataclass(frozen=True, slots=True)
class GroupGauges:
    cluster: str
    broker_name: str
    master_id: int | None
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set_size: int
    active_brokers: int


@dataclass(frozen=True, slots=True)
class ControllerSnapshot:
    """One scrape's worth: who this controller is, whether it is active, the counters and
    each known group's gauges."""

    member_id: str
    address: str
    group: str
    active: bool
    requests: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (type, status)
    elections: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    # (cluster, broker set, result) → count
    groups: tuple[GroupGauges, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", MappingProxyType(dict(self.requests)))
        object.__setattr__(self, "elections", MappingProxyType(dict(self.elections)))


class ControllerStats:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()
        self.elections: Counter[tuple[str, str, str]] = Counter()

    def request(self, code: int, ok: bool) -> None:
        self.requests[(request_type(code), SUCCESS if ok else FAILED)] += 1

    def election(self, cluster: str, broker_name: str, result: str) -> None:
        self.elections[(cluster, broker_name, result)] += 1

"""The controller's metric families, built at scrape time from a ``ControllerSource``.

RocketMQ 5.1.4's controller metrics by their names and labels (every family carries
``address``, ``group`` and ``peer_id``: this controller's address, its controller group and id),
and rocketstore's per-group gauges::

    Family                                       type     labels beyond the controller's
    role                                         gauge    -      3 active (RocketMQ's LEADER),
                                                                 2 standby (FOLLOWER)
    election_total                               counter  cluster, broker_set, election_result
                                                          (new_master_elected,
                                                          keep_current_master,
                                                          no_master_elected)
    request_total                                counter  request_type, request_handle_status
    active_broker_num                            gauge    cluster, broker_set
    rocketstore_controller_master_epoch          gauge    cluster, broker_set
    rocketstore_controller_sync_state_set_epoch  gauge    cluster, broker_set
    rocketstore_controller_sync_state_set_size   gauge    cluster, broker_set
    rocketstore_controller_has_master            gauge    cluster, broker_set   (1 / 0)

The per-group gauges show the groups as this controller last read them (every
``scanInactiveMasterInterval``, and at each request about a group).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from ..controller import ControllerSnapshot

ROLE_ACTIVE = 3  # RocketMQ's MemberState.Role LEADER
ROLE_STANDBY = 2  # FOLLOWER
CONTROLLER_LABELS = ("address", "group", "peer_id")
GROUP_LABELS = ("cluster", "broker_set")


class ControllerSource(Protocol):
    def snapshot(self) -> ControllerSnapshot: ...


class ControllerCollector:
    """A prometheus_client custom collector over one controller."""

    def __init__(self, source: ControllerSource) -> None:
        self.source = source

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.source.snapshot()
        own = [snap.address, snap.group, snap.member_id]

        role = GaugeMetricFamily(
            "role", "Role of this controller: 3 active, 2 standby", labels=CONTROLLER_LABELS
        )
        role.add_metric(own, ROLE_ACTIVE if snap.active else ROLE_STANDBY)
        yield role

        elections = CounterMetricFamily(
            "election",
            "Elections this controller ran, by result",
            labels=[*CONTROLLER_LABELS, *GROUP_LABELS, "election_result"],
        )
        for (cluster, broker_set, result), count in sorted(snap.elections.items()):
            elections.add_metric([*own, cluster, broker_set, result], count)
        yield elections

        requests = CounterMetricFamily(
            "request",
            "Requests this controller served",
            labels=[*CONTROLLER_LABELS, "request_type", "request_handle_status"],
        )
        for (kind, status), count in sorted(snap.requests.items()):
            requests.add_metric([*own, kind, status], count)
        yield requests

        def group_gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*CONTROLLER_LABELS, *GROUP_LABELS])

        active = group_gauge("active_broker_num", "Brokers of the group whose heartbeats arrive")
        epoch = group_gauge("rocketstore_controller_master_epoch", "The group's master epoch")
        set_epoch = group_gauge(
            "rocketstore_controller_sync_state_set_epoch", "The group's SyncStateSet epoch"
        )
        set_size = group_gauge(
            "rocketstore_controller_sync_state_set_size", "Replicas in the group's SyncStateSet"
        )
        has_master = group_gauge(
            "rocketstore_controller_has_master", "Whether the group has a master (1) or not (0)"
        )
        for g in snap.groups:
            labels = [*own, g.cluster, g.broker_name]
            active.add_metric(labels, g.active_brokers)
            epoch.add_metric(labels, g.master_epoch)
            set_epoch.add_metric(labels, g.sync_state_set_epoch)
            set_size.add_metric(labels, g.sync_state_set_size)
            has_master.add_metric(labels, 0 if g.master_id is None else 1)
        yield from (active, epoch, set_epoch, set_size, has_master)

"""InSyncReplicas: a controller-mode master's SyncStateSet, its confirm offset and the put stage
that holds a SYNC put until enough of the set hold it (RocketMQ 5's AutoSwitchHAService and
GroupTransferService in controller mode).

The set::

    confirmed   the SyncStateSet the controller last confirmed (and its epoch)
    proposed    a change sent to the controller and not answered yet (None: none); while one
                is out, the set in force is the union of both, so a slave leaving the set is
                still waited for until the controller agrees, and one joining is waited for
                at once
    acks        each connected slave's newest acknowledged offset

A slave joins (``on_ack`` proposes it) when it holds the confirm offset and has reached this
master's epoch; it leaves (``shrink``, run every few seconds, proposes it) when it has not
caught up for ``max_not_catchup_ms`` or is not connected at all; its connection closing
proposes its removal at once. Proposals go to ``on_propose`` (the broker sends
ALTER_SYNC_STATE_SET; its answer comes back through ``set_sync_state_set``).

A put (see ``_put_stages``) needs ``min_in_sync_replicas`` replicas of the set in force to hold
it, this master counting as one (every member with ``all_ack``); it is answered PUT_OK once
they do, FLUSH_SLAVE_TIMEOUT when they do not within the timeout. While the set in force is
smaller than ``min_in_sync_replicas`` puts are refused before they are written
(IN_SYNC_REPLICAS_NOT_ENOUGH, through ``set_refusal``).

The lease: a master keeps acknowledging only while its standing with the controller is
confirmed (``renew_lease``); once the lease has run out no wait completes with PUT_OK (it
times out) and new puts are answered SERVICE_NOT_AVAILABLE, so a master that was paused or cut
off never acknowledges a write after another master may have been elected.

The confirm offset is how far every member of the set in force holds the log (the log's end
when the set is this master alone); dispatch to the consume queues stops there, so consumers
see only what survives a failover.

Threads: ``on_ack`` / ``connection_closed`` from the connections' reader threads; the put
stage from putting threads; the set changes and the lease from the broker's thread; the
deadline loop in its own thread. ``_set_lock`` guards the set state; waits complete outside it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from .._clock import Clock
from ..log._message import PutMessageResult, PutMessageStatus
from ._transfer import GroupTransferService

log = logging.getLogger(__name__)

Refusal = tuple[PutMessageStatus, str] | None
NOT_ENOUGH = "in-sync"
# how the refusals of a fenced master begin (the broker answers them with this text)
FENCED_PREFIX = "fenced: "


class InSyncReplicas(GroupTransferService):
    def __init__(
        self,
        clock: Clock,
        *,
        timeout_s: float,
        all_ack: bool,
        in_sync_replicas: int,
        min_in_sync_replicas: int,
        max_not_catchup_ms: int,
        max_offset: Callable[[], int],
        wake_writers: Callable[[], None],
        set_refusal: Callable[[str, Refusal], None],
        on_confirm: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(
            clock,
            timeout_s=timeout_s,
            fallbehind_max=1 << 62,
            connection_count=lambda: len(self.acks),
            wake_writers=wake_writers,
        )
        self.name = "InSyncReplicas"
        self.all_ack = all_ack
        self.need = max(in_sync_replicas, min_in_sync_replicas)
        self.min_in_sync = min_in_sync_replicas
        self.max_not_catchup_s = max_not_catchup_ms / 1000.0
        self.max_offset = max_offset
        self.set_refusal = set_refusal
        self.on_confirm = on_confirm
        self.on_propose: Callable[[frozenset[int]], None] = lambda _members: None
        self._set_lock = threading.Lock()
        self.is_master = False
        self.local_id: int | None = None
        self.epoch_start = 0  # where this master's epoch begins
        self.confirmed: frozenset[int] = frozenset()
        self.confirmed_epoch = 0
        self.proposed: frozenset[int] | None = None
        # derived from the above on every change of the set (rare), read on every ack
        self._force: frozenset[int] = frozenset()
        self._others: tuple[int, ...] = ()  # the set in force but this master
        self._acked = 0  # how far enough of the set hold the log (-2: the log's end)
        self.acks: dict[int, int] = {}
        self.caught_up: dict[int, float] = {}
        self.confirm = 0
        self._solo = False  # the set in force is this master alone: confirm = the log's end
        self.lease_until = math.inf
        self.lease_timeouts = 0  # waits refused because the lease had run out

    # ---- the set ----------------------------------------------------------------------------

    def in_force(self) -> frozenset[int]:
        """The confirmed set, with a proposed change added while it is out."""
        return self._force

    def _set_changed_locked(self) -> None:
        proposed = self.proposed
        force = self.confirmed if proposed is None else self.confirmed | proposed
        self._force = force
        self._others = tuple(sorted(m for m in force if m != self.local_id))

    def in_sync_count(self) -> int:
        """RocketMQ's inSyncReplicasNums: the larger of the confirmed and proposed sets."""
        proposed = self.proposed
        n = len(self.confirmed)
        return n if proposed is None else max(n, len(proposed))

    def become_master(
        self, local_id: int, members: frozenset[int], set_epoch: int, epoch_start: int
    ) -> None:
        """This store is the master from ``epoch_start`` on, with the controller's set. Pending
        waits of an earlier term end first (FLUSH_SLAVE_TIMEOUT)."""
        self._end_waits()
        with self._set_lock:
            self.is_master = True
            self.local_id = local_id
            self.epoch_start = epoch_start
            self.confirmed = frozenset(members) | {local_id}
            self.confirmed_epoch = set_epoch
            self.proposed = None
            self._set_changed_locked()
            self.acks = {}
            self.caught_up = {}
            with self._lock:
                self.acked = 0
            self._recompute_locked()
        self._update_refusal()

    def become_slave(self) -> None:
        """Not a master any more: waits end (FLUSH_SLAVE_TIMEOUT), the set is forgotten."""
        with self._set_lock:
            self.is_master = False
            self.proposed = None
            self._set_changed_locked()
            self.acks = {}
            self.caught_up = {}
            self._solo = False
        self._end_waits()
        self.set_refusal(NOT_ENOUGH, None)

    def set_sync_state_set(self, members: frozenset[int], set_epoch: int) -> bool:
        """The controller's set (an answer to a proposal, or learnt from it): taken when its
        epoch is newer. Returns whether it was taken."""
        with self._set_lock:
            if not self.is_master or set_epoch <= self.confirmed_epoch:
                return False
            old = self.confirmed
            self.confirmed = frozenset(members)
            self.confirmed_epoch = set_epoch
            self.proposed = None
            self._set_changed_locked()
            self._recompute_locked()
        if old != self.confirmed:
            log.info(
                "SyncStateSet changed from %s to %s (epoch %d)",
                sorted(old),
                sorted(self.confirmed),
                set_epoch,
            )
        self._update_refusal()
        self._notify()
        return True

    def proposal_failed(self) -> None:
        """The controller refused (or did not answer) the proposal: the confirmed set stays."""
        with self._set_lock:
            self.proposed = None
            self._set_changed_locked()
            self._recompute_locked()
        self._update_refusal()
        self._notify()

    def _propose_locked(self, members: frozenset[int]) -> frozenset[int] | None:
        if not self.is_master or members == self.confirmed or members == self.proposed:
            return None
        self.proposed = members
        self._set_changed_locked()
        self._recompute_locked()
        return members

    def _after_propose(self, members: frozenset[int] | None) -> None:
        if members is None:
            return
        self._update_refusal()
        try:
            self.on_propose(members)
        except Exception:
            log.exception("proposing the SyncStateSet %s failed", sorted(members))

    def shrink(self) -> frozenset[int] | None:
        """Propose the set without the slaves that have not caught up for too long or are
        not connected (RocketMQ's maybeShrinkSyncStateSet); the proposal, or None."""
        now = self.clock.monotonic()
        with self._set_lock:
            if not self.is_master:
                return None
            keep = set(self.confirmed)
            for member in self.confirmed:
                if member == self.local_id:
                    continue
                seen = self.caught_up.get(member)
                if member not in self.acks or seen is None or now - seen > self.max_not_catchup_s:
                    keep.discard(member)
            members = frozenset(keep)
            proposal = None if members == self.confirmed else self._propose_locked(members)
        self._after_propose(proposal)
        return proposal

    # ---- the connections --------------------------------------------------------------------

    def on_ack(self, slave_id: int, offset: int, caught_up_at: float | None) -> None:
        """A slave acknowledged ``offset`` (``caught_up_at``: when it last held everything
        the master had sent, None when it is behind). Reader threads."""
        proposal = None
        with self._set_lock:
            if not self.is_master:
                return
            self.acks[slave_id] = offset
            if caught_up_at is not None:
                prev = self.caught_up.get(slave_id, 0.0)
                self.caught_up[slave_id] = max(prev, caught_up_at)
            elif slave_id not in self.caught_up:
                self.caught_up[slave_id] = self.clock.monotonic()
            if (
                slave_id not in self.in_force()
                and caught_up_at is not None
                and offset >= self.confirm
                and offset >= self.epoch_start
            ):
                log.info(
                    "slave %d caught up at %d (confirm offset %d, epoch start %d): proposing it "
                    "for the SyncStateSet",
                    slave_id,
                    offset,
                    self.confirm,
                    self.epoch_start,
                )
                proposal = self._propose_locked(self.in_force() | {slave_id})
            self._recompute_locked()
        self._after_propose(proposal)
        self._notify()

    def note_caught_up(self, slave_id: int, at: float) -> None:
        """The master had nothing more to send to ``slave_id`` at ``at``. Writer threads."""
        with self._set_lock:
            if self.is_master and slave_id in self.acks:
                self.caught_up[slave_id] = max(self.caught_up.get(slave_id, 0.0), at)

    def connection_opened(self, slave_id: int) -> None:
        with self._set_lock:
            if self.is_master:
                self.acks.setdefault(slave_id, -1)

    def connection_closed(self, slave_id: int) -> None:
        """A slave's connection ended: it leaves the acks, and the set (proposed at once, as
        RocketMQ does) when it was in it. Reader threads."""
        proposal = None
        with self._set_lock:
            self.acks.pop(slave_id, None)
            self.caught_up.pop(slave_id, None)
            if self.is_master and slave_id in self.confirmed and slave_id != self.local_id:
                proposal = self._propose_locked(self.in_force() - {slave_id})
            self._recompute_locked()
        self._after_propose(proposal)
        self._notify()

    # ---- what the set holds -----------------------------------------------------------------

    def _recompute_locked(self) -> None:
        """The acknowledged end (how far enough of the set hold the log) and the confirm
        offset (how far all of it does), from the acks and the set in force. ``_set_lock``
        held."""
        if not self.is_master:
            return
        others = self._others
        self._solo = not others
        if not others:
            self.confirm = max(self.confirm, self.max_offset())
            self._acked = -2
            return
        acks = self.acks
        held = [acks.get(m, -1) for m in others]
        lowest = min(held)  # -1 while a member is not connected: the confirm offset stays
        if lowest > self.confirm:
            self.confirm = lowest
        if self.all_ack:
            self._acked = lowest
            return
        need = self.need - 1  # this master holds it
        if need <= 0:
            self._acked = -2
            return
        held.sort(reverse=True)
        self._acked = held[need - 1] if len(held) >= need else -1

    def acked_end(self) -> int:
        """How far the log is held by enough of the set for a put to be acknowledged."""
        if not self.is_master:
            return 0
        acked = self._acked
        return self.max_offset() if acked == -2 else acked

    def confirm_offset(self) -> int:
        """How far the set in force holds the log. Any thread; cheap."""
        if self._solo:
            return self.max_offset()
        return self.confirm

    def set_confirm(self, offset: int) -> None:
        """A slave: the confirm offset its master sent."""
        self.confirm = offset

    def _notify(self) -> None:
        if self.lease_valid():
            end = self.acked_end()
            if end > 0:
                self.notify_transfer_some(end)
        self.on_confirm()

    def _update_refusal(self) -> None:
        with self._set_lock:
            n = self.in_sync_count() if self.is_master else self.min_in_sync
        if n < self.min_in_sync:
            self.set_refusal(
                NOT_ENOUGH,
                (
                    PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
                    f"in-sync replicas not enough: the SyncStateSet has {n}, "
                    f"minInSyncReplicas is {self.min_in_sync}",
                ),
            )
        else:
            self.set_refusal(NOT_ENOUGH, None)

    # ---- the lease --------------------------------------------------------------------------

    def renew_lease(self, until: float) -> None:
        """Acknowledge puts until ``until`` (monotonic seconds). The broker's thread."""
        renewed = until > self.lease_until or self.lease_until <= self.clock.monotonic()
        self.lease_until = until
        if renewed:
            self._notify()

    def expire_lease(self) -> None:
        self.lease_until = 0.0

    def lease_valid(self) -> bool:
        return self.clock.monotonic() < self.lease_until

    # ---- the put stage ----------------------------------------------------------------------

    def _at_once(self, end: int, result: PutMessageResult) -> PutMessageResult | None:
        if not self.lease_valid():
            self.lease_timeouts += 1
            return result._replace(
                status=PutMessageStatus.SERVICE_NOT_AVAILABLE,
                error=f"{FENCED_PREFIX}the master's lease with the controller ran out",
            )
        if not self.all_ack and self.need <= 1:
            return result
        if self.acked >= end:
            return result
        if self._solo and self.all_ack:
            return result
        return None

    def _end_waits(self) -> None:
        """End every pending wait now (FLUSH_SLAVE_TIMEOUT unless covered)."""
        with self._lock:
            left = [e for e in self._by_arrival if not e[5]]
            for e in left:
                e[5] = 1
            for e in self._by_end:
                if not e[5] and e[4] is None:
                    e[5] = 1
                    e[3].release()
            self._blocked = 0
            self._by_arrival.clear()
            self._by_end = []
        self._time_out(left)

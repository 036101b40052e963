"""A controller-mode master's SyncStateSet, kept with the controller (RocketMQ 5.1.4's
ReplicasManager.checkSyncStateSetAndDoReport and doReportSyncStateSetChanged).

The store proposes changes (``InSyncReplicas.on_propose``, from the HA threads): a slave that
caught up joins, one whose connection closed leaves; every ``checkSyncStateSetPeriod`` the
master also drops the slaves that stopped catching up (``InSyncReplicas.shrink``). Each proposal
goes out as one ALTER_SYNC_STATE_SET at a time (the newest waiting one; older ones are
dropped), with the master epoch and the set epoch it replaces; the controller's answer becomes
the set in force. A refusal drops the proposal (the set confirmed before stays in force); a
fenced one (another master epoch, another set epoch, another master) also asks the broker to
check its role at once.

Loop thread (the broker's event loop); ``propose`` from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ...protocol._controller_bodies import SyncStateSet
from ...protocol._controller_client import ControllerClient
from ...protocol._errors import ControllerError, ControllerRefusedError
from ...remoting import RemotingError, ResponseCode
from ...store.ha._in_sync import InSyncReplicas

log = logging.getLogger(__name__)

FENCED_CODES = frozenset(
    {
        int(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH),
        int(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        int(ResponseCode.CONTROLLER_INVALID_MASTER),
    }
)

# (broker name, this master's broker id, its master epoch), None while not a master
MasterTerm = Callable[[], "tuple[str, int, int] | None"]


class SyncStateSetReporter:
    def __init__(
        self,
        client: ControllerClient,
        in_sync: InSyncReplicas,
        *,
        term: MasterTerm,
        check_period_s: float,
        on_fenced: Callable[[], None],
        label: Callable[[], str],
    ) -> None:
        self.client = client
        self.in_sync = in_sync
        self.term = term
        self.check_period_s = check_period_s
        self.on_fenced = on_fenced
        self.label = label
        self.proposals = 0
        self.refused = 0
        self._proposed: frozenset[int] | None = None
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Take the store's proposals and check the set periodically. Loop thread."""
        self._loop = asyncio.get_running_loop()
        self.in_sync.on_propose = self.propose
        self._tasks = [
            asyncio.create_task(self._send_proposals(), name="sync-state-set-proposals"),
            asyncio.create_task(self._check_periodically(), name="sync-state-set-check"),
        ]

    async def close(self) -> None:
        self.in_sync.on_propose = lambda _members: None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    def propose(self, members: frozenset[int]) -> None:
        """A proposal from the store (any thread): sent by the proposal task."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def take() -> None:
            self._proposed = members
            self._wake.set()

        loop.call_soon_threadsafe(take)

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.check_period_s)
            if self.term() is not None:
                self.in_sync.shrink()

    async def _send_proposals(self) -> None:
        in_sync = self.in_sync
        while True:
            await self._wake.wait()
            self._wake.clear()
            members, self._proposed = self._proposed, None
            term = self.term()
            if members is None or term is None:
                continue
            name, broker_id, epoch = term
            self.proposals += 1
            try:
                result = await self.client.alter_sync_state_set(
                    name, broker_id, epoch, SyncStateSet(members, in_sync.confirmed_epoch)
                )
            except ControllerRefusedError as exc:
                self.refused += 1
                in_sync.proposal_failed()
                log.warning("%s: SyncStateSet %s refused: %s", self.label(), sorted(members), exc)
                if exc.code in FENCED_CODES:
                    self.on_fenced()
                continue
            except (ControllerError, RemotingError) as exc:
                self.refused += 1
                in_sync.proposal_failed()
                log.warning("%s: SyncStateSet %s not sent: %s", self.label(), sorted(members), exc)
                continue
            in_sync.set_sync_state_set(result.members, result.epoch)

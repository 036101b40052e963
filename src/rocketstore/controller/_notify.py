"""NOTIFY_BROKER_ROLE_CHANGED: after a group gets a new master, the controller tells each of
its brokers that is alive (one-way, as RocketMQ 5.1.4's NotifyService does), so they take
their roles at once instead of at their next GET_REPLICA_INFO::

    code 1008, extFields masterAddress, masterEpoch, syncStateSetEpoch, masterBrokerId,
    body SyncStateSet {"syncStateSet":[2],"syncStateSetEpoch":5}

A notice still on its way to a broker when a newer master epoch is announced to it is
cancelled. A broker that cannot be reached is logged and left to learn its role by asking.

Loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..protocol._controller_bodies import SyncStateSet
from ..protocol._controller_headers import NotifyBrokerRoleChangedRequest
from ..remoting import AsyncRemotingClient, RemotingCommand, RemotingError, RequestCode
from ..remoting._client import FROM_ENV, Signer
from ._replicas import Election

log = logging.getLogger(__name__)


def notice_of(election: Election) -> RemotingCommand:
    header = NotifyBrokerRoleChangedRequest(
        election.master_address,
        election.master_epoch,
        election.sync_state_set_epoch,
        election.new_master,
    )
    body = SyncStateSet(election.sync_state_set, election.sync_state_set_epoch).encode()
    return RemotingCommand.request(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.to_ext(), body, oneway=True
    )


class RoleNotifier:
    """Sends the notices; ``alive(broker_id)`` of the election's group picks the recipients.
    ``signer`` signs them (brokers with ACL on take a notice from an admin account only)."""

    def __init__(
        self, client: AsyncRemotingClient | None = None, *, signer: Signer | None = FROM_ENV
    ) -> None:
        self.client = client if client is not None else AsyncRemotingClient(signer=signer)
        self._pending: dict[str, tuple[int, asyncio.Task[None]]] = {}
        self.sent = 0

    def notify(self, election: Election, alive: Callable[[int], bool]) -> list[str]:
        """Start a notice to each alive member of the election's group; their addresses."""
        if election.new_master is None:
            return []
        targets = [a for i, a in sorted(election.members.items()) if alive(i)]
        for address in targets:
            old = self._pending.get(address)
            if old is not None and not old[1].done() and old[0] < election.master_epoch:
                old[1].cancel()
            task = asyncio.create_task(self._send(address, notice_of(election)))
            self._pending[address] = (election.master_epoch, task)
            task.add_done_callback(lambda t, a=address: self._done(a, t))  # type: ignore[misc]
        return targets

    def _done(self, address: str, task: asyncio.Task[None]) -> None:
        entry = self._pending.get(address)
        if entry is not None and entry[1] is task:
            del self._pending[address]

    async def _send(self, address: str, notice: RemotingCommand) -> None:
        try:
            await self.client.invoke_oneway(address, notice)
            self.sent += 1
            log.info(
                "controller: told %s its group's master is %s (master epoch %s)",
                address,
                notice.ext_fields.get("masterBrokerId"),
                notice.ext_fields.get("masterEpoch"),
            )
        except RemotingError as exc:
            log.warning("controller: could not tell %s of its new role: %s", address, exc)

    async def close(self) -> None:
        tasks = [task for _epoch, task in self._pending.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pending.clear()
        self.client.close()

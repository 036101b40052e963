"""Where the controller's state lives: one small interface over an existing consensus engine,
in the manner of Patroni's DCS layer, with two implementations side by side:

- ``FileBackend`` (``_file_backend``): one controller; the records in a durable local file,
  leadership the lock on its directory;
- ``EtcdBackend`` (``_etcd_backend``): several controllers over an etcd cluster; leadership an
  etcd key bound to the holder's lease, every write a transaction on the record's revision that
  also checks the leadership it was made under.

The verbs::

    open / close                 make ready (read the file, reach etcd) / let go
    take_leadership(me)          become, or stay, the active controller; True while held
    holds_leadership()           whether leadership is held as far as this process knows now
    release_leadership()         give it up (a clean shutdown: another takes over at once)
    leader() / members()         who leads, who is there (GET_METADATA_INFO's leader and peers)
    read(name) / read_all()      a group's record and its revision (the poll of every group)
    compare_and_set(name, record, revision)
                                 store ``record`` (None: delete the group) if the group is
                                 still at ``revision`` (0: absent); the new revision, or None
                                 when it is not; LeadershipLostError when the leadership is
                                 not (or no longer) this controller's

A write can only succeed for the controller that holds the leadership and only over the revision
it read, so two controllers never both change a group: the foundation of "never two masters".
Errors: ``BackendUnavailableError`` when the engine cannot be reached, ``StateCorruptError`` for
a stored record that does not decode.

Loop thread: every verb is a coroutine on the controller's event loop (blocking I/O runs in a
worker thread).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from ._record import GroupRecord


@dataclass(frozen=True, slots=True)
class Member:
    """A controller: its id (RocketMQ's controllerDLegerSelfId) and remoting address."""

    member_id: str
    address: str


@dataclass(frozen=True, slots=True)
class Versioned:
    record: GroupRecord
    revision: int


class StateBackend(abc.ABC):
    """The controller's state: leadership and one record per broker group."""

    kind: str = ""

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def take_leadership(self, me: Member) -> bool: ...

    @abc.abstractmethod
    def holds_leadership(self) -> bool: ...

    @abc.abstractmethod
    async def release_leadership(self) -> None: ...

    @abc.abstractmethod
    async def leader(self) -> Member | None: ...

    @abc.abstractmethod
    async def members(self) -> list[Member]: ...

    @abc.abstractmethod
    async def read(self, broker_name: str) -> Versioned | None: ...

    @abc.abstractmethod
    async def read_all(self) -> dict[str, Versioned]: ...

    @abc.abstractmethod
    async def compare_and_set(
        self, broker_name: str, record: GroupRecord | None, revision: int
    ) -> int | None: ...

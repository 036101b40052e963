"""The file backend: one controller's state in a durable local file (the default).

The directory it owns::

    <controllerStorePath>/
      lock              an exclusive flock held by the active controller, holding its
                        {"id": ..., "address": ..., "pid": ...}
      replicas.json     every group's record and revision:
                        {"v": 1, "revision": 7,
                         "groups": {"broker-a": {"revision": 7, "record": {GroupRecord}}}}
      replicas.json.tmp a write in progress (ignored and removed at open)

Each change is written whole to ``replicas.json.tmp``, fsynced, renamed over ``replicas.json``
and the directory fsynced, so after a crash the file holds either the state before the change
or after it, never a mix: a restarted controller keeps every group's epochs. A change is
answered only once it is on disk; a write that fails (a full disk) leaves the state as it was
and is reported (``BackendUnavailableError``). A ``replicas.json`` that does not decode stops
the controller from starting (``StateCorruptError``): nothing is guessed.

Leadership is the lock: the controller that holds it is active; another process pointed at the
same directory waits (standby) and reads the file for what it shows.

Loop thread; file I/O runs in a worker thread, one change at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any

from ..store._durable import fsync_dir, write_synced
from ._backend import Member, StateBackend, Versioned
from ._errors import BackendUnavailableError, LeadershipLostError, StateCorruptError
from ._record import GroupRecord

log = logging.getLogger(__name__)

STATE_FILE = "replicas.json"
LOCK_FILE = "lock"
FORMAT_VERSION = 1


def decode_state(data: bytes) -> tuple[int, dict[str, Versioned]]:
    """(the last revision, name → Versioned) of a state file's bytes; StateCorruptError."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StateCorruptError(f"{STATE_FILE} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
        raise StateCorruptError(f"{STATE_FILE} is not a controller state of format 1")
    revision = doc.get("revision")
    groups = doc.get("groups")
    if not isinstance(revision, int) or not isinstance(groups, dict):
        raise StateCorruptError(f"{STATE_FILE} has no revision or no groups")
    out: dict[str, Versioned] = {}
    for name, entry in groups.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("revision"), int):
            raise StateCorruptError(f"{STATE_FILE}: group {name!r} has no revision")
        try:
            record = GroupRecord.from_doc(entry.get("record"))
        except StateCorruptError as exc:
            raise StateCorruptError(f"group {name!r}: {exc}") from None
        if record.broker_name != name:
            raise StateCorruptError(f"{STATE_FILE}: group {name!r} holds {record.broker_name!r}")
        out[name] = Versioned(record, entry["revision"])
    return revision, out


def encode_state(revision: int, groups: dict[str, Versioned]) -> bytes:
    doc: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "revision": revision,
        "groups": {
            name: {"revision": v.revision, "record": v.record.to_doc()}
            for name, v in sorted(groups.items())
        },
    }
    return json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8")


class FileBackend(StateBackend):
    """The state of one controller in ``directory`` (see the module docstring)."""

    kind = "file"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        self.path = self.directory / STATE_FILE
        self._revision = 0
        self._groups: dict[str, Versioned] = {}
        self._lock_fd: int | None = None
        self._me: Member | None = None
        self._writing = asyncio.Lock()

    # ---- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        await asyncio.to_thread(self._open)

    def _open(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                (self.directory / (STATE_FILE + ".tmp")).unlink()
        except OSError as exc:
            raise BackendUnavailableError(f"cannot use {self.directory}: {exc}") from exc
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._revision, self._groups = 0, {}
            return
        except OSError as exc:
            raise BackendUnavailableError(f"cannot read {self.path}: {exc}") from exc
        try:
            self._revision, self._groups = decode_state(data)
        except StateCorruptError as exc:
            raise StateCorruptError(
                f"{self.path}: {exc} (nothing is guessed: restore it)"
            ) from None

    async def close(self) -> None:
        await self.release_leadership()

    # ---- leadership: the directory's lock -----------------------------------------------------

    async def take_leadership(self, me: Member) -> bool:
        self._me = me
        if self._lock_fd is not None:
            return True
        return await asyncio.to_thread(self._try_lock, me)

    def _try_lock(self, me: Member) -> bool:
        try:
            fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BackendUnavailableError(
                f"cannot open {self.directory / LOCK_FILE}: {exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        try:
            text = json.dumps({"id": me.member_id, "address": me.address, "pid": os.getpid()})
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode("utf-8"), 0)
            self._load()  # a controller that held the lock before may have changed the file
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        self._lock_fd = fd
        return True

    def holds_leadership(self) -> bool:
        return self._lock_fd is not None

    async def release_leadership(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    async def leader(self) -> Member | None:
        if self._lock_fd is not None:
            return self._me
        return await asyncio.to_thread(self._lock_holder)

    def _lock_holder(self) -> Member | None:
        """The controller holding the lock, as it wrote itself there (None: nobody holds it)."""
        try:
            fd = os.open(self.directory / LOCK_FILE, os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:  # held
                raw = os.pread(fd, 4096, 0)
                try:
                    doc = json.loads(raw)
                    return Member(str(doc["id"]), str(doc["address"]))
                except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                    return None
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    async def members(self) -> list[Member]:
        leader = await self.leader()
        out = [m for m in (leader, self._me) if m is not None]
        return list(dict.fromkeys(out))

    # ---- records ----------------------------------------------------------------------------

    async def read(self, broker_name: str) -> Versioned | None:
        if self._lock_fd is None:  # a standby: the file as the active controller left it
            await asyncio.to_thread(self._load)
        return self._groups.get(broker_name)

    async def read_all(self) -> dict[str, Versioned]:
        if self._lock_fd is None:
            await asyncio.to_thread(self._load)
        return dict(self._groups)

    async def compare_and_set(
        self, broker_name: str, record: GroupRecord | None, revision: int
    ) -> int | None:
        async with self._writing:
            if self._lock_fd is None:
                raise LeadershipLostError(f"{self.directory} is locked by another controller")
            current = self._groups.get(broker_name)
            if (0 if current is None else current.revision) != revision:
                return None
            new_revision = self._revision + 1
            groups = dict(self._groups)
            if record is None:
                groups.pop(broker_name, None)
            else:
                groups[broker_name] = Versioned(record, new_revision)
            data = encode_state(new_revision, groups)
            try:
                await asyncio.to_thread(self._write, data)
            except OSError as exc:
                raise BackendUnavailableError(f"cannot write {self.path}: {exc}") from exc
            self._revision, self._groups = new_revision, groups
            return new_revision

    def _write(self, data: bytes) -> None:
        tmp = self.path.with_name(STATE_FILE + ".tmp")
        write_synced(tmp, data)
        os.replace(tmp, self.path)
        fsync_dir(self.directory)

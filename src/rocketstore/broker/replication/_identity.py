"""The broker's identity in controller mode: the id the controller gave it, kept beside the store
so that a restart registers as the same replica (RocketMQ 5's BrokerMetadata and
TempBrokerMetadata files).

Two small text files in the store's root::

    brokerIdentity         DefaultCluster#broker-a#2              cluster#name#id
    brokerIdentity-temp    DefaultCluster#broker-a#2#127.0.0.1:30911;1700000000000
                                                                  ... #registerCheckCode

Registration (RocketMQ 5.1.4's ReplicasManager.register): with ``brokerIdentity`` present the id
is known; else with ``brokerIdentity-temp`` present the broker applies for the id it names
(the check code tells the controller it is the same broker asking again); else it asks the
controller for the next id, writes the temp file, applies, then writes ``brokerIdentity`` and
removes the temp file. A file naming another cluster or broker name is an error (the store
belongs to another group).

Each file is written to a temporary file, fsynced and renamed; the directory is fsynced.
The files: any thread; ``obtain_broker_id``: the broker's loop (the files in worker threads).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ...protocol._controller_client import ControllerClient
from ...protocol._errors import ControllerRefusedError
from ...store._durable import fsync_dir, replace_synced
from ...store._errors import StoreConfigError, translate_os_errors

log = logging.getLogger(__name__)

IDENTITY_FILE = "brokerIdentity"
TEMP_SUFFIX = "-temp"


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster: str
    broker_name: str
    broker_id: int
    check_code: str = ""  # the temp file's registerCheckCode

    def encode(self) -> str:
        text = f"{self.cluster}#{self.broker_name}#{self.broker_id}"
        return f"{text}#{self.check_code}" if self.check_code else text

    @classmethod
    def decode(cls, text: str, what: str, *, temp: bool) -> BrokerIdentity:
        parts = text.strip().split("#")
        if len(parts) != (4 if temp else 3) or not parts[0] or not parts[1]:
            raise StoreConfigError(f"{what}: not a broker identity: {text.strip()!r}")
        try:
            broker_id = int(parts[2])
        except ValueError:
            raise StoreConfigError(f"{what}: the broker id is not a number: {parts[2]!r}") from None
        return cls(parts[0], parts[1], broker_id, parts[3] if temp else "")


class IdentityFiles:
    """``brokerIdentity`` and its temp file under ``root``."""

    def __init__(self, root: str | os.PathLike[str], cluster: str, broker_name: str) -> None:
        self.path = Path(root) / IDENTITY_FILE
        self.temp_path = Path(root) / (IDENTITY_FILE + TEMP_SUFFIX)
        self.cluster = cluster
        self.broker_name = broker_name

    def _read(self, path: Path, *, temp: bool) -> BrokerIdentity | None:
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreConfigError(f"cannot read {path}: {exc}") from exc
        if not text.strip():
            return None
        found = BrokerIdentity.decode(text, str(path), temp=temp)
        if (found.cluster, found.broker_name) != (self.cluster, self.broker_name):
            raise StoreConfigError(
                f"{path} is the identity of {found.cluster}/{found.broker_name}, this broker is "
                f"{self.cluster}/{self.broker_name}: the store belongs to another broker group"
            )
        return found

    def identity(self) -> BrokerIdentity | None:
        return self._read(self.path, temp=False)

    def temp(self) -> BrokerIdentity | None:
        return self._read(self.temp_path, temp=True)

    def _write(self, path: Path, text: str) -> None:
        with translate_os_errors(f"write {path}"):
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_synced(path, text.encode("utf-8"))
            fsync_dir(path.parent)

    def write_temp(self, broker_id: int, check_code: str) -> BrokerIdentity:
        found = BrokerIdentity(self.cluster, self.broker_name, broker_id, check_code)
        self._write(self.temp_path, found.encode())
        return found

    def commit(self, broker_id: int) -> BrokerIdentity:
        """Write ``brokerIdentity`` for ``broker_id`` and remove the temp file."""
        found = BrokerIdentity(self.cluster, self.broker_name, broker_id)
        self._write(self.path, found.encode())
        self.clear_temp()
        return found

    def clear_temp(self) -> None:
        with translate_os_errors(f"remove {self.temp_path}"):
            try:
                self.temp_path.unlink()
            except FileNotFoundError:
                return
            fsync_dir(self.temp_path.parent)


async def obtain_broker_id(
    files: IdentityFiles, client: ControllerClient, address: str, now_ms: int
) -> int:
    """This broker's id in its group: from ``brokerIdentity``, else applied for (the temp
    file's id, or the controller's next one) and then written there. ControllerRefusedError
    (BROKER_ID_INVALID) when another broker took the id: the temp file is gone, the next call
    starts over. Loop thread."""
    found = await asyncio.to_thread(files.identity)
    if found is not None:
        return found.broker_id
    temp = await asyncio.to_thread(files.temp)
    if temp is None:
        next_id = await client.next_broker_id(files.cluster, files.broker_name)
        temp = await asyncio.to_thread(files.write_temp, next_id, f"{address};{now_ms}")
    try:
        await client.apply_broker_id(
            files.cluster, files.broker_name, temp.broker_id, temp.check_code
        )
    except ControllerRefusedError:
        await asyncio.to_thread(files.clear_temp)
        raise
    done = await asyncio.to_thread(files.commit, temp.broker_id)
    log.info("%s: the controller gave this broker id %d", files.broker_name, done.broker_id)
    return done.broker_id

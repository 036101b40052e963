"""The exception tree of rocketstore.

    StoreError
    ├── StoreConfigError         a configuration value was refused
    ├── StoreLockedError         another process owns the store directory
    ├── StoreClosedError         the store (or a component) is not running
    ├── StoreIOError             an OSError, translated at the storage boundary
    ├── CorruptFileError         a file has the wrong size, name or contents
    │   └── CorruptRecordError   a commit-log record failed a check (magic, length, CRC)
    ├── OffsetOutOfRangeError    a physical or logical offset outside what is stored
    └── InvalidMessageError      a message the store refuses to write (topic, body, properties)

Put and get results carry RocketMQ's status enums instead of raising, because those statuses
travel on the wire to clients; everything else raises one of the errors above.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class StoreError(Exception):
    """Base class of every error rocketstore raises."""


class StoreConfigError(StoreError, ValueError):
    """A configuration key or value was refused."""


class StoreLockedError(StoreError):
    """The store directory is owned (locked) by another process."""


class StoreClosedError(StoreError):
    """The store or one of its components is shut down or not yet started."""


class StoreIOError(StoreError, OSError):
    """An operating-system error while reading or writing store files."""


class IndexWriteError(StoreIOError):
    """Dispatch could not write the index (the StoreIOError it got, errno kept): the store
    reports WRITE_INDEX_FILE_ERROR rather than WRITE_LOGICS_QUEUE_ERROR."""


class CorruptFileError(StoreError):
    """A store file has the wrong size, name or contents."""


class CorruptRecordError(CorruptFileError):
    """A commit-log record failed a check: magic code, length or body CRC."""


class OffsetOutOfRangeError(StoreError, IndexError):
    """An offset outside the range the store holds."""


class InvalidMessageError(StoreError, ValueError):
    """A message the store will not write: bad topic, oversized body or properties."""


@contextlib.contextmanager
def translate_os_errors(what: str) -> Iterator[None]:
    """Turn an OSError raised inside the block into a StoreIOError naming ``what``."""
    try:
        yield
    except StoreError:
        raise
    except OSError as exc:
        raise StoreIOError(exc.errno, f"{what}: {exc.strerror or exc}") from exc

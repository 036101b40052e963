"""rocketstore: Apache RocketMQ's message store in Python."""

from . import _speedups as _speedups  # first: it decides which builds the modules below use
from .store._clock import Clock as Clock
from .store._clock import ManualClock as ManualClock
from .store._clock import SystemClock as SystemClock
from .store._config import StoreConfig as StoreConfig
from .store._errors import CorruptFileError as CorruptFileError
from .store._errors import CorruptRecordError as CorruptRecordError
from .store._errors import InvalidMessageError as InvalidMessageError
from .store._errors import OffsetOutOfRangeError as OffsetOutOfRangeError
from .store._errors import StoreClosedError as StoreClosedError
from .store._errors import StoreConfigError as StoreConfigError
from .store._errors import StoreError as StoreError
from .store._errors import StoreIOError as StoreIOError
from .store._errors import StoreLockedError as StoreLockedError
from .store._store import MessageStore as MessageStore
from .store.log._message import GetMessageResult as GetMessageResult
from .store.log._message import GetMessageStatus as GetMessageStatus
from .store.log._message import Message as Message
from .store.log._message import PutMessageResult as PutMessageResult
from .store.log._message import PutMessageStatus as PutMessageStatus
from .store.log._record import MessageExt as MessageExt
from .store.services._stats import StoreStatistics as StoreStatistics
from .store.services._stats import TopicPutStats as TopicPutStats

__version__ = "0.1.0"

__all__ = [
    "Clock",
    "CorruptFileError",
    "CorruptRecordError",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidMessageError",
    "ManualClock",
    "Message",
    "MessageExt",
    "MessageStore",
    "OffsetOutOfRangeError",
    "PutMessageResult",
    "PutMessageStatus",
    "StoreClosedError",
    "StoreConfig",
    "StoreConfigError",
    "StoreError",
    "StoreIOError",
    "StoreLockedError",
    "StoreStatistics",
    "SystemClock",
    "TopicPutStats",
    "__version__",
]

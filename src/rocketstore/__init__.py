"""rocketstore: Apache RocketMQ's message store in Python."""

from ._clock import Clock as Clock
from ._clock import ManualClock as ManualClock
from ._clock import SystemClock as SystemClock
from ._config import StoreConfig as StoreConfig
from ._errors import CorruptFileError as CorruptFileError
from ._errors import CorruptRecordError as CorruptRecordError
from ._errors import InvalidMessageError as InvalidMessageError
from ._errors import OffsetOutOfRangeError as OffsetOutOfRangeError
from ._errors import StoreClosedError as StoreClosedError
from ._errors import StoreConfigError as StoreConfigError
from ._errors import StoreError as StoreError
from ._errors import StoreIOError as StoreIOError
from ._errors import StoreLockedError as StoreLockedError
from ._message import GetMessageResult as GetMessageResult
from ._message import GetMessageStatus as GetMessageStatus
from ._message import Message as Message
from ._message import PutMessageResult as PutMessageResult
from ._message import PutMessageStatus as PutMessageStatus
from ._record import MessageExt as MessageExt
from ._stats import StoreStatistics as StoreStatistics
from ._stats import TopicPutStats as TopicPutStats
from ._store import MessageStore as MessageStore

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

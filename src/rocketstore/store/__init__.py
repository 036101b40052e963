"""The message store: RocketMQ 4.x's commit log, consume queues, key index, flush, dispatch,
recovery, delayed delivery, cleaning and statistics.

The public names are re-exported from :mod:`rocketstore`; the modules here are private
(``_x.py``). The store imports no front end: the broker, the name server, the gRPC service and
the Spark source sit above it.
"""

from ._config import StoreConfig as StoreConfig
from ._store import MessageStore as MessageStore
from .log._message import Message as Message
from .log._message import PutMessageResult as PutMessageResult
from .log._message import PutMessageStatus as PutMessageStatus

__all__ = ["Message", "MessageStore", "PutMessageResult", "PutMessageStatus", "StoreConfig"]

"""A small RocketMQ 4.x client over the remoting protocol: a producer and a pull consumer
(the CLI's produce / consume, the Spark source's broker mode, benchmarks)."""

from ._consumer import PullConsumer as PullConsumer
from ._consumer import PullResult as PullResult
from ._consumer import decode_records as decode_records
from ._names import InvalidNameError as InvalidNameError
from ._producer import Producer as Producer
from ._producer import SendResult as SendResult
from ._route import ClientError as ClientError
from ._route import MessageQueue as MessageQueue
from ._route import NameServerUnreachableError as NameServerUnreachableError
from ._route import NotANameServerError as NotANameServerError
from ._route import TopicNotFoundError as TopicNotFoundError
from ._route import TopicRoute as TopicRoute

__all__ = [
    "ClientError",
    "InvalidNameError",
    "MessageQueue",
    "NameServerUnreachableError",
    "NotANameServerError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "SendResult",
    "TopicNotFoundError",
    "TopicRoute",
    "decode_records",
]

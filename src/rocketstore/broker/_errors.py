"""The broker's exceptions, one branch of rocketstore's single exception tree.

    StoreError                        (rocketstore.StoreError)
    └── BrokerError                   a broker request or broker state refused something
        ├── InvalidTopicError         a topic name breaks RocketMQ's rules (SYSTEM_ERROR on the wire)
        ├── InvalidSubscriptionError  a subscription expression cannot be parsed
        │                             (SUBSCRIPTION_PARSE_FAILED on the wire)
        ├── InvalidHeartbeatError     a heartbeat body is not what a client sends
        └── ConfigFileError           a config file and its ``.bak`` are both unusable
                                      (also a CorruptFileError)

The invalid-input errors are also ``ValueError``s. Request processors translate them into
response codes at one place; state modules never return sentinels for refused input.
"""

from __future__ import annotations

from ..store._errors import CorruptFileError, StoreError


class BrokerError(StoreError):
    """Base class of the errors raised by the broker's state and processors."""


class InvalidTopicError(BrokerError, ValueError):
    """A topic name is blank, too long, has characters outside ``[%|a-zA-Z0-9_-]`` or may not be
    created this way."""


class InvalidSubscriptionError(BrokerError, ValueError):
    """A subscription expression (``"TagA || TagB"``) cannot be parsed."""


class InvalidHeartbeatError(BrokerError, ValueError):
    """A HEART_BEAT body that is not JSON of the expected shape."""


class ConfigFileError(BrokerError, CorruptFileError):
    """A broker config file is damaged and no usable ``.bak`` exists: the broker refuses to start
    rather than silently forgetting topics or consumer offsets."""

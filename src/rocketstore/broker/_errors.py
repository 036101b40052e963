"""The broker's exceptions, one branch of rocketstore's single exception tree.

    StoreError                        (rocketstore.StoreError)
    └── BrokerError                   a broker request or broker state refused something
        ├── InvalidTopicError         a topic name breaks RocketMQ's rules (SYSTEM_ERROR on the wire)
        └── ConfigFileError           a config file and its ``.bak`` are both unusable
                                      (also a CorruptFileError)

A body a client sends that is not what the protocol says is a ``ProtocolError``
(rocketstore.protocol._errors: a bad subscription expression or heartbeat body). The
invalid-input errors are also ``ValueError``s. Request processors translate them into
response codes at one place; state modules never return sentinels for refused input.
"""

from __future__ import annotations

from ..store._errors import CorruptFileError, StoreError


class BrokerError(StoreError):
    """Base class of the errors raised by the broker's state and processors."""


class InvalidTopicError(BrokerError, ValueError):
    """A topic name is blank, too long, has characters outside ``[%|a-zA-Z0-9_-]`` or may not be
    created this way."""


class ConfigFileError(BrokerError, CorruptFileError):
    """A broker config file is damaged and no usable ``.bak`` exists: the broker refuses to start
    rather than silently forgetting topics or consumer offsets."""

"""RocketMQ 4.x's remoting protocol: frames, the header codec, request and response codes, an
asyncio server and clients. No broker logic and no store imports.
"""

from ._client import AsyncRemotingClient as AsyncRemotingClient
from ._client import RemotingClient as RemotingClient
from ._client import split_address as split_address
from ._codes import LanguageCode as LanguageCode
from ._codes import RequestCode as RequestCode
from ._codes import ResponseCode as ResponseCode
from ._command import DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME
from ._command import FrameError as FrameError
from ._command import RemotingCommand as RemotingCommand
from ._command import ext_bool as ext_bool
from ._command import ext_int as ext_int
from ._command import ext_int32 as ext_int32
from ._command import ext_str as ext_str
from ._connection import Connection as Connection
from ._connection import Handler as Handler
from ._connection import RemotingError as RemotingError
from ._limits import RequestError as RequestError
from ._limits import ServerLimits as ServerLimits
from ._limits import ServerStatistics as ServerStatistics
from ._loop import new_event_loop as new_event_loop
from ._loop import use_uvloop as use_uvloop
from ._server import RemotingServer as RemotingServer

__all__ = [
    "DEFAULT_MAX_FRAME",
    "AsyncRemotingClient",
    "Connection",
    "FrameError",
    "Handler",
    "LanguageCode",
    "RemotingClient",
    "RemotingCommand",
    "RemotingError",
    "RemotingServer",
    "RequestCode",
    "RequestError",
    "ResponseCode",
    "ServerLimits",
    "ServerStatistics",
    "ext_bool",
    "ext_int",
    "ext_int32",
    "ext_str",
    "new_event_loop",
    "split_address",
    "use_uvloop",
]

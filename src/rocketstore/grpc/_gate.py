"""What a gRPC call may cost before it is let in: the handlers the front end serves
``apache.rocketmq.v2.MessagingService`` with.

A call's request is read only when its handler asks for it, so each handler decides first
whether the call may cost the broker its message::

    call arrives (its metadata)
      │ ACL on: the signature checked from the metadata (AclServicer.authenticate);
      │         refused: answered UNAUTHORIZED, the request never read
      ▼
    SendMessage: room for a request of the largest size taken from the front end's budget
      │          (``room``: max_buffered_bytes, shared with receives and Telemetry replies),
      │          waiting up to send_wait_ms; none: answered TOO_MANY_REQUESTS, never read
      ▼
    the request read and decoded; SendMessage: its room shrunk to what it costs
      │   (SEND_COPIES times its size: the request and the record the store writes)
      ▼
    ACL on: the permissions and the client id checked on the request (AclServicer)
      ▼
    the service ── SendMessage: its room given back once answered

What the transport holds of a call nobody reads: gRPC's HTTP/2 transport takes a stream's
data up to its flow-control window. The front end turns off gRPC's BDP probing
(``grpc.http2.bdp_probe``), which would widen every stream's window towards whole messages, so
a call whose request is not read holds some 64 KiB there; a request being read holds at most
``grpc.max_receive_message_length`` (the largest message and its framing).

With the ACL off, every method but SendMessage is served as generated (nothing is added to
its path); SendMessage's handler takes its room and reads its request itself.

Loop thread only (grpc.aio runs the handlers on the broker's event loop).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from ..remoting._room import ByteRoom
from ._acl import METHODS
from ._convert import Code, status
from ._pb import service_pb2 as spb

if TYPE_CHECKING:
    from ._acl import AclServicer
    from ._service import MessagingService

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
# what a send holds while it is stored, in times its request's size: the decoded request and
# the record written from it (the request's bytes are let go once decoded)
SEND_COPIES = 2
_SERVER_STREAMS = frozenset({"ReceiveMessage", "PullMessage"})
_BIDIRECTIONAL = frozenset({"Telemetry"})


def message_types(method: str) -> tuple[Any, Any]:
    """(request type, response type) of a MessagingService method."""
    if method in _BIDIRECTIONAL:
        return spb.TelemetryCommand, spb.TelemetryCommand
    return getattr(spb, f"{method}Request"), getattr(spb, f"{method}Response")


async def _request(context: Any) -> Any:
    """The call's one request (None: the client sent none), read with ``context.read`` (a
    request iterator left part-read would keep the request it last yielded until the garbage
    collector finds it: measured, hundreds of MiB under a flood of large sends)."""
    request = await context.read()
    return None if request is grpc.aio.EOF else request


class Gate:
    """The MessagingService handlers over ``service`` (behind ``acl`` when the ACL is on),
    with SendMessage's requests counted in ``room``. ``max_request``: the largest request the
    server reads (its ``grpc.max_receive_message_length``)."""

    def __init__(
        self,
        service: MessagingService,
        acl: AclServicer | None,
        room: ByteRoom,
        *,
        max_request: int,
        send_wait_s: float,
    ) -> None:
        self.service = service
        self.acl = acl
        self.room = room
        self.max_request = max_request
        self.send_wait_s = send_wait_s
        self.sends_refused = 0  # answered TOO_MANY_REQUESTS: no room within send_wait_s
        self.refused_unread = 0  # answered UNAUTHORIZED before their request was read

    def handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """Every method's handler, by name."""
        out: dict[str, grpc.RpcMethodHandler] = {}
        for method in METHODS:
            request_type, response_type = message_types(method)
            decode, encode = request_type.FromString, response_type.SerializeToString
            if method == "SendMessage":
                out[method] = grpc.stream_unary_rpc_method_handler(
                    self._send, request_deserializer=None, response_serializer=encode
                )
            elif method in _BIDIRECTIONAL:
                inner = getattr(self.acl if self.acl is not None else self.service, method)
                out[method] = grpc.stream_stream_rpc_method_handler(
                    inner, request_deserializer=decode, response_serializer=encode
                )
            elif self.acl is None:
                inner = getattr(self.service, method)
                make = (
                    grpc.unary_stream_rpc_method_handler
                    if method in _SERVER_STREAMS
                    else grpc.unary_unary_rpc_method_handler
                )
                out[method] = make(inner, request_deserializer=decode, response_serializer=encode)
            elif method in _SERVER_STREAMS:
                out[method] = grpc.stream_stream_rpc_method_handler(
                    self._signed_stream(self.acl, method),
                    request_deserializer=decode,
                    response_serializer=encode,
                )
            else:
                out[method] = grpc.stream_unary_rpc_method_handler(
                    self._signed_unary(self.acl, method, response_type),
                    request_deserializer=decode,
                    response_serializer=encode,
                )
        return out

    def add_to(self, server: Any) -> None:
        """Serve the handlers on ``server`` (a grpc.aio server, not started)."""
        handlers = self.handlers()
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        server.add_registered_method_handlers(SERVICE_NAME, handlers)

    # ---- ACL on: the signature before the request ---------------------------------------------

    def _signed_unary(
        self, acl: AclServicer, method: str, response_type: Any
    ) -> Callable[[AsyncIterator[Any], Any], Any]:
        inner = getattr(acl, method)  # the permissions on the request, then the service

        async def call(requests: AsyncIterator[Any], context: Any) -> Any:
            refused = acl.authenticate(method, context)
            if refused is not None:
                self.refused_unread += 1
                return response_type(status=refused)
            request = await _request(context)
            if request is None:
                return response_type(status=status(Code.BAD_REQUEST, "no request message"))
            return await inner(request, context)

        return call

    def _signed_stream(
        self, acl: AclServicer, method: str
    ) -> Callable[[AsyncIterator[Any], Any], AsyncIterator[Any]]:
        inner = getattr(acl, method)

        async def call(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            refused = acl.authenticate(method, context)
            if refused is not None:
                self.refused_unread += 1
                for answer in acl.refused_stream(method, refused):
                    yield answer
                return
            request = await _request(context)
            if request is None:
                _request_type, response_type = message_types(method)
                yield response_type(status=status(Code.BAD_REQUEST, "no request message"))
                return
            async for answer in inner(request, context):
                yield answer

        return call

    # ---- SendMessage: room before the request ------------------------------------------------

    async def _send(self, requests: AsyncIterator[bytes], context: Any) -> spb.SendMessageResponse:
        acl = self.acl
        if acl is not None:
            refused = acl.authenticate("SendMessage", context)
            if refused is not None:
                self.refused_unread += 1
                return spb.SendMessageResponse(status=refused)
        room = self.room
        held = self.max_request * SEND_COPIES
        if not room.try_acquire(held) and not await room.acquire(held, self._wait_s(context)):
            self.sends_refused += 1
            return spb.SendMessageResponse(
                status=status(
                    Code.TOO_MANY_REQUESTS,
                    "the broker holds as many messages as it may: try again later",
                )
            )
        try:
            request, size = await self._read_send(context)
            cost = size * SEND_COPIES
            if cost < held:
                room.release(held - cost)
                held = cost
            if request is None:
                return spb.SendMessageResponse(
                    status=status(Code.BAD_REQUEST, "no SendMessageRequest could be decoded")
                )
            inner = acl.SendMessage if acl is not None else self.service.SendMessage
            response: spb.SendMessageResponse = await inner(request, context)
            return response
        finally:
            room.release(held)

    async def _read_send(self, context: Any) -> tuple[spb.SendMessageRequest | None, int]:
        """The request decoded (None: none came, or it does not decode) and its size; its
        bytes are let go here."""
        raw = await _request(context)
        if raw is None:
            return None, 0
        try:
            return spb.SendMessageRequest.FromString(raw), len(raw)
        except DecodeError:
            return None, len(raw)

    def _wait_s(self, context: Any) -> float:
        remaining = context.time_remaining()
        if remaining is None:
            return self.send_wait_s
        return max(0.0, min(self.send_wait_s, float(remaining) - 0.05))

"""``apache.rocketmq.v2.MessagingService`` on grpc.aio: each RPC (checked by the ACL before it
gets here, see ``_acl``) hands the request to its service (routes and clients here; sends,
pop, pull in modules of their own)
and answers refusals with the protocol's status codes in the response, never with a gRPC error,
so a bad request leaves the stream and the server as they were.

Refusals travel as GrpcError up to one place per RPC kind (``_unary``, the streams), where they
become the response's Status; an unexpected exception becomes INTERNAL_SERVER_ERROR (logged).

Loop thread only (grpc.aio runs the handlers on the broker's event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from ..broker.state._topic_config import PERM_READ, PERM_WRITE
from ..remoting._limits import LogLimiter
from ._acl import CLIENT_ID_HEADER
from ._checks import check_group, check_topic, topic_config
from ._clients import ClientRegistry
from ._config import GrpcConfig
from ._convert import Code, GrpcError, status, timestamp, to_proto_message
from ._pb import definition_pb2 as pb
from ._pb import service_pb2 as spb
from ._pb import service_pb2_grpc
from ._pull import PullService
from ._recall import RecallContext, recall
from ._receive import PopService
from ._replies import Replies
from ._routes import BrokerQueues, ClusterRoutes
from ._send import SendService
from ._transaction import TransactionFront

log = logging.getLogger(__name__)

# a client's bad request is one line, an internal failure a traceback: a few a minute each
_bad_requests = LogLimiter(log)
_failures = LogLimiter(log)


class ServiceContext(RecallContext, Protocol):
    """What the gRPC service uses of the broker (its checks, and recalls)."""


def _failed(call: str, exc: Exception) -> pb.Status:
    """The status answering a call that raised, logged within the limits: a ValueError is the
    request's fault (BAD_REQUEST, one line), anything else an internal error (a traceback)."""
    if isinstance(exc, ValueError):
        _bad_requests.log(logging.WARNING, "%s: bad request: %s", call, exc)
        return status(Code.BAD_REQUEST, str(exc))
    _failures.log(logging.ERROR, "%s failed", call, exc_info=exc)
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


# message types a topic takes
ACCEPT_MESSAGE_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)

R = TypeVar("R")


def _add_queues(
    response: spb.QueryRouteResponse,
    topic: pb.Resource,
    broker: pb.Broker,
    perm: int,
    read_nums: int,
    write_nums: int,
) -> None:
    """One broker's queues of a route: ids 0.. first readable and writable, then read-only or
    write-only ones."""
    readable, writeable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    both = min(read_nums, write_nums)
    kinds: list[int] = []
    if readable and writeable:
        kinds = [pb.READ_WRITE] * both
        kinds += [pb.READ] * (read_nums - both)
        kinds += [pb.WRITE] * (write_nums - both)
    elif readable:
        kinds = [pb.READ] * read_nums
    elif writeable:
        kinds = [pb.WRITE] * write_nums
    else:
        kinds = [pb.NONE] * max(1, read_nums, write_nums)
    for queue_id, permission in enumerate(kinds):
        mq = response.message_queues.add(id=queue_id, permission=permission)  # type: ignore[arg-type]
        mq.topic.CopyFrom(topic)
        mq.broker.CopyFrom(broker)
        mq.accept_message_types.extend(ACCEPT_MESSAGE_TYPES)


def _remote_broker_pb(other: BrokerQueues) -> pb.Broker:
    out = pb.Broker(name=other.broker_name, id=other.broker_id)
    out.endpoints.scheme = pb.IPv6 if ":" in other.host else pb.IPv4
    out.endpoints.addresses.add(host=other.host, port=other.port)
    return out


def _permission(perm: int) -> int:
    readable, writeable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writeable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    if writeable:
        return pb.WRITE
    return pb.NONE


def _metadata(context: Any) -> list[tuple[str, Any]]:
    return [(str(k), v) for k, v in (context.invocation_metadata() or ())]


def _client_id(context: Any) -> str:
    for key, value in _metadata(context):
        if key.lower() == CLIENT_ID_HEADER and isinstance(value, str):
            return value
    return ""


def _peer_host(context: Any) -> str | None:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` → ``127.0.0.1:5000`` / ``[::1]:5000``."""
    peer = str(context.peer() or "")
    kind, _, addr = peer.partition(":")
    if kind in ("ipv4", "ipv6") and addr:
        return addr.replace("%5B", "[").replace("%5D", "]")
    return None


def _remaining(context: Any) -> float | None:
    remaining = context.time_remaining()
    return float(remaining) if remaining is not None else None


class MessagingService(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        broker: ServiceContext,
        config: GrpcConfig,
        clients: ClientRegistry,
        sends: SendService,
        pops: PopService,
        pulls: PullService,
        endpoint: Callable[[], tuple[str, int]],
        transactions: TransactionFront,
        routes: ClusterRoutes | None = None,
    ) -> None:
        self.broker = broker
        self.config = config
        self.clients = clients
        self.sends = sends
        self.pops = pops
        self.pulls = pulls
        self._endpoint = endpoint
        self.transactions = transactions
        self.routes = routes
        self.auth_failures = 0  # calls the ACL refused (counted by its AclServicer)
        self.telemetry_stalls = 0  # Telemetry streams stopped for not reading their replies
        self.telemetry_open = 0  # Telemetry streams open now
        self.telemetry_closed = 0  # Telemetry streams that ended

    # ---- plumbing ----------------------------------------------------------------------------

    async def _unary(
        self, context: Any, response: Callable[[], R], handle: Callable[[], Awaitable[R] | R]
    ) -> R:
        try:
            result = handle()
            if asyncio.iscoroutine(result):
                result = await result
            return result  # type: ignore[return-value]
        except GrpcError as exc:
            out = response()
            out.status.CopyFrom(status(exc.code, exc.message))  # type: ignore[attr-defined]
            return out
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            out = response()
            out.status.CopyFrom(_failed("gRPC request", exc))  # type: ignore[attr-defined]
            return out

    # ---- routes ------------------------------------------------------------------------------

    def _broker_pb(self, endpoints: pb.Endpoints) -> pb.Broker:
        out = pb.Broker(name=self.broker.config.broker_name, id=self.broker.config.broker_id)
        if endpoints.addresses:
            out.endpoints.CopyFrom(endpoints)
        else:
            host, port = self._endpoint()
            out.endpoints.scheme = pb.IPv6 if ":" in host else pb.IPv4
            out.endpoints.addresses.add(host=host, port=port)
        return out

    async def _query_route(self, request: spb.QueryRouteRequest) -> spb.QueryRouteResponse:
        topic = check_topic(request.topic, self.broker.topics)
        config = topic_config(self.broker, topic, create=True)
        response = spb.QueryRouteResponse(status=status(Code.OK))
        perm = config.perm & self.broker.config.broker_permission
        _add_queues(
            response,
            request.topic,
            self._broker_pb(request.endpoints),
            perm,
            config.read_queue_nums,
            config.write_queue_nums,
        )
        # the other broker groups of the cluster, each at its own gRPC front end
        for other in await self._others(topic):
            _add_queues(
                response,
                request.topic,
                _remote_broker_pb(other),
                other.perm,
                other.read_queue_nums,
                other.write_queue_nums,
            )
        return response

    async def _others(self, topic: str) -> list[BrokerQueues]:
        if self.routes is None or not self.broker.config.namesrv_addrs:
            return []
        return await self.routes.others(topic)

    async def _query_assignment(
        self, request: spb.QueryAssignmentRequest
    ) -> spb.QueryAssignmentResponse:
        topic = check_topic(request.topic, self.broker.topics)
        check_group(request.group)
        config = topic_config(self.broker, topic, create=False)
        perm = config.perm & self.broker.config.broker_permission
        others = [
            o for o in await self._others(topic) if o.perm & PERM_READ and o.read_queue_nums > 0
        ]
        local = bool(perm & PERM_READ) and config.read_queue_nums > 0
        if not local and not others:
            raise GrpcError(Code.FORBIDDEN, "no readable queue")
        response = spb.QueryAssignmentResponse(status=status(Code.OK))
        brokers = [(perm, self._broker_pb(request.endpoints))] if local else []
        brokers += [(o.perm, _remote_broker_pb(o)) for o in others]
        for broker_perm, broker_pb in brokers:
            mq = response.assignments.add().message_queue
            mq.topic.CopyFrom(request.topic)
            mq.id = -1  # every queue of the broker: a receive pops from all of them
            mq.permission = _permission(broker_perm)  # type: ignore[assignment]
            mq.broker.CopyFrom(broker_pb)
            mq.accept_message_types.extend(ACCEPT_MESSAGE_TYPES)
        return response

    # ---- RPCs --------------------------------------------------------------------------------

    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: Any
    ) -> spb.QueryRouteResponse:
        return await self._unary(
            context, spb.QueryRouteResponse, lambda: self._query_route(request)
        )

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: Any
    ) -> spb.QueryAssignmentResponse:
        return await self._unary(
            context, spb.QueryAssignmentResponse, lambda: self._query_assignment(request)
        )

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        def handle() -> spb.HeartbeatResponse:
            client_id = _client_id(context)
            if not client_id:
                raise GrpcError(Code.CLIENT_ID_REQUIRED, "no x-mq-client-id header")
            group = request.group if request.HasField("group") else None
            self.clients.heartbeat(client_id, request.client_type, group)
            return spb.HeartbeatResponse(status=status(Code.OK))

        return await self._unary(context, spb.HeartbeatResponse, handle)

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        def handle() -> spb.NotifyClientTerminationResponse:
            client_id = _client_id(context)
            if not client_id:
                raise GrpcError(Code.CLIENT_ID_REQUIRED, "no x-mq-client-id header")
            if request.HasField("group"):
                check_group(request.group)
            self.clients.terminate(client_id)
            self.pops.release_client(client_id)
            return spb.NotifyClientTerminationResponse(status=status(Code.OK))

        return await self._unary(context, spb.NotifyClientTerminationResponse, handle)

    async def SendMessage(
        self, request: spb.SendMessageRequest, context: Any
    ) -> spb.SendMessageResponse:
        return await self._unary(
            context,
            spb.SendMessageResponse,
            lambda: self.sends.send(request, _peer_host(context)),
        )

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: Any
    ) -> spb.AckMessageResponse:
        return await self._unary(context, spb.AckMessageResponse, lambda: self.pops.ack(request))

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        return await self._unary(
            context,
            spb.ChangeInvisibleDurationResponse,
            lambda: self.pops.change_invisible(request),
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        async def handle() -> spb.ForwardMessageToDeadLetterQueueResponse:
            await self.pops.forward_to_dlq(request)
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(Code.OK))

        return await self._unary(context, spb.ForwardMessageToDeadLetterQueueResponse, handle)

    async def UpdateOffset(
        self, request: spb.UpdateOffsetRequest, context: Any
    ) -> spb.UpdateOffsetResponse:
        def handle() -> spb.UpdateOffsetResponse:
            self.pulls.update_offset(request, _client_id(context) or (_peer_host(context) or ""))
            return spb.UpdateOffsetResponse(status=status(Code.OK))

        return await self._unary(context, spb.UpdateOffsetResponse, handle)

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Any) -> spb.GetOffsetResponse:
        return await self._unary(
            context,
            spb.GetOffsetResponse,
            lambda: spb.GetOffsetResponse(
                status=status(Code.OK), offset=self.pulls.get_offset(request)
            ),
        )

    async def QueryOffset(
        self, request: spb.QueryOffsetRequest, context: Any
    ) -> spb.QueryOffsetResponse:
        return await self._unary(
            context,
            spb.QueryOffsetResponse,
            lambda: spb.QueryOffsetResponse(
                status=status(Code.OK), offset=self.pulls.query_offset(request)
            ),
        )

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: Any
    ) -> spb.EndTransactionResponse:
        return await self._unary(
            context, spb.EndTransactionResponse, lambda: self.transactions.end(request)
        )

    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: Any
    ) -> spb.RecallMessageResponse:
        return await self._unary(
            context, spb.RecallMessageResponse, lambda: recall(self.broker, request)
        )

    async def SyncLiteSubscription(
        self, request: spb.SyncLiteSubscriptionRequest, context: Any
    ) -> spb.SyncLiteSubscriptionResponse:
        def handle() -> spb.SyncLiteSubscriptionResponse:
            raise GrpcError(Code.UNSUPPORTED, "lite topics are not supported")

        return await self._unary(context, spb.SyncLiteSubscriptionResponse, handle)

    # ---- streams -----------------------------------------------------------------------------

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """Status, then the messages, then the delivery timestamp. A message that cannot be
        written (the client went away) is made visible again soon."""
        try:
            found = await self.pops.receive(request, _remaining(context), _client_id(context))
        except GrpcError as exc:
            yield spb.ReceiveMessageResponse(status=status(exc.code, exc.message))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(self.pops.clock.now_ms()))
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=_failed("ReceiveMessage", exc))
            return
        sent = 0
        try:
            if found:
                yield spb.ReceiveMessageResponse(status=status(Code.OK))
                topic = request.message_queue.topic.name
                for msg, receipt in found:
                    yield spb.ReceiveMessageResponse(
                        message=to_proto_message(
                            msg,
                            topic=topic,
                            receipt_handle=receipt.handle,
                            invisible_ms=receipt.invisible_ms,
                            attempt=receipt.attempt,
                        )
                    )
                    sent += 1
                    self.pops.delivered(msg)  # written: its room goes back
            else:
                yield spb.ReceiveMessageResponse(
                    status=status(Code.MESSAGE_NOT_FOUND, "no new message")
                )
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(self.pops.clock.now_ms()))
        finally:
            for msg, receipt in found[sent:]:
                self.pops.delivered(msg)
                self.pops.nack(receipt)

    async def PullMessage(
        self, request: spb.PullMessageRequest, context: Any
    ) -> AsyncIterator[spb.PullMessageResponse]:
        """Status, then the messages, then the next offset."""
        try:
            code, message, result, next_offset = await self.pulls.pull(request, _remaining(context))
        except GrpcError as exc:
            yield spb.PullMessageResponse(status=status(exc.code, exc.message))
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            yield spb.PullMessageResponse(status=_failed("PullMessage", exc))
            return
        yield spb.PullMessageResponse(status=status(code, message))
        if result is not None:
            for msg in result.messages:
                yield spb.PullMessageResponse(message=to_proto_message(msg))
        yield spb.PullMessageResponse(next_offset=next_offset)

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """Answer each Settings with the broker's settings; other commands (thread stack
        traces, verify results) are taken without an answer. The broker's own commands
        (orphaned-transaction checks) go down the same stream. The replies wait in a bounded
        queue (``Replies``): while it is full the client's commands are not read; a reply
        that finds no place (or room) for ``telemetry_stall_ms`` stops the reading for good
        and the waiting replies are dropped (a client that does not read its replies gets
        nothing more from the stream; gRPC cannot end a stream whose client does not read,
        it ends when the client does or at its deadline)."""
        client_id = _client_id(context)
        cfg = self.config
        out = Replies(self.pops.room, cfg.telemetry_queue_size)
        stall_s = cfg.telemetry_stall_ms / 1000.0

        async def read() -> None:
            try:
                async for command in request_iterator:
                    answer = self._telemetry_answer(client_id, command)
                    if answer is not None and not await out.put(answer, stall_s):
                        self.telemetry_stalls += 1
                        _bad_requests.log(
                            logging.WARNING,
                            "Telemetry of client %r: its replies unread for %g s, "
                            "its commands are not read any more",
                            client_id,
                            stall_s,
                        )
                        out.drain()  # what waits is dropped, its room given back
                        return
            finally:
                out.end()

        reader = asyncio.create_task(read())
        if client_id:
            self.transactions.add_stream(client_id, out)
        self.telemetry_open += 1
        try:
            while (item := await out.get()) is not None:
                command, size = item
                out.written(size)  # (one reply a stream at most is being written)
                yield command
        finally:
            if client_id:
                self.transactions.remove_stream(client_id, out)
            out.drain()
            self.telemetry_open -= 1
            self.telemetry_closed += 1
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    def _telemetry_answer(
        self, client_id: str, command: spb.TelemetryCommand
    ) -> spb.TelemetryCommand | None:
        if command.WhichOneof("command") != "settings":
            self.clients.touch(client_id)
            return None
        if not client_id:
            return spb.TelemetryCommand(
                status=status(Code.CLIENT_ID_REQUIRED, "no x-mq-client-id header")
            )
        try:
            settings = self.clients.update_settings(client_id, command.settings)
        except GrpcError as exc:
            return spb.TelemetryCommand(status=status(exc.code, exc.message))
        return spb.TelemetryCommand(status=status(Code.OK), settings=settings)

"""The frames an AsyncProducer writes, captured by a loopback peer that answers as a name server
and a broker, against the frames the reference encoder builds for the same sends
(``send_request`` → ``RemotingCommand.encode``): byte for byte, the opaque, the born time and
the UNIQ_KEY taken from the captured frame. Also the producer's behaviour around the frames:
queues in turn, results, retries on a refusal or a lost connection, timeouts, routes through
the default topic, and the message id's form.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rocketstore.client._async_producer import AsyncProducer
from rocketstore.client._producer import (
    UNIQ_IDS,
    SendResult,
    batch_body,
    message_properties,
    send_request,
)
from rocketstore.client._route import ClientError, MessageQueue
from rocketstore.remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from rocketstore.remoting._command import decode_frame
from support.remoting import run_on as run

pytestmark = pytest.mark.timeout(60)

GROUP = "frames-producer"
TOPIC = "FramesTopic"
BROKER = "broker-f"
UNIQ = re.compile(r"[0-9A-F]{32}")
LOOPS = ["asyncio", "uvloop"]


class Peer(asyncio.Protocol):
    """One connection of the fake peer: cuts frames, keeps each send's raw bytes, answers by
    the owner's script."""

    def __init__(self, owner: FakeBroker) -> None:
        self.owner = owner
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.owner.connections.append(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            (length,) = struct.unpack_from(">i", self.buf, 0)
            if len(self.buf) < 4 + length:
                return
            raw = bytes(self.buf[: 4 + length])
            del self.buf[: 4 + length]
            self.owner.received(self, raw)

    def answer(self, request: RemotingCommand, response: RemotingCommand) -> None:
        response.opaque = request.opaque
        assert self.transport is not None
        self.transport.write(response.encode())


class FakeBroker:
    """Name server and broker on one loopback port. ``script`` decides each send's answer:
    a response code, "silent" (no answer), "close" (the connection is closed)."""

    def __init__(self) -> None:
        self.address = ""
        self.connections: list[Peer] = []
        self.sends: list[bytes] = []  # raw frames of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
        self.route_requests: list[str] = []
        self.topics = {TOPIC, "TBW102"}
        self.script: list[int | str] = []
        self.offsets: dict[int, int] = {}
        self.server: asyncio.Server | None = None

    def route_body(self, topic: str) -> bytes:
        doc = {
            "brokerDatas": [{"brokerName": BROKER, "brokerAddrs": {"0": self.address}}],
            "queueDatas": [
                {"brokerName": BROKER, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
            ],
        }
        return json.dumps(doc).encode()

    def received(self, peer: Peer, raw: bytes) -> None:
        cmd = decode_frame(raw[4:])
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = str(cmd.ext_fields["topic"])
            self.route_requests.append(topic)
            if topic in self.topics:
                r = RemotingCommand.response(ResponseCode.SUCCESS, body=self.route_body(topic))
            else:
                r = RemotingCommand.response(ResponseCode.TOPIC_NOT_EXIST, "no route")
            peer.answer(cmd, r)
            return
        self.sends.append(raw)
        what = self.script.pop(0) if self.script else ResponseCode.SUCCESS
        if what == "silent":
            return
        if what == "close":
            assert peer.transport is not None
            peer.transport.close()
            return
        assert isinstance(what, int)
        if what != ResponseCode.SUCCESS:
            peer.answer(cmd, RemotingCommand.response(what, f"refused with {what}"))
            return
        qid = int(cmd.ext_fields["e"])
        offset = self.offsets.get(qid, 0)
        self.offsets[qid] = offset + 1
        ext = {"msgId": f"7F00000100002A9F{offset:016X}", "queueId": str(qid)}
        ext["queueOffset"] = str(offset)
        peer.answer(cmd, RemotingCommand.response(ResponseCode.SUCCESS, None, ext))
        if cmd.ext_fields["b"] not in self.topics:
            self.topics.add(str(cmd.ext_fields["b"]))  # created by the send, as a broker does


@contextlib.asynccontextmanager
async def fake_broker() -> AsyncIterator[FakeBroker]:
    fake = FakeBroker()
    loop = asyncio.get_running_loop()
    fake.server = await loop.create_server(lambda: Peer(fake), "127.0.0.1", 0)
    port = fake.server.sockets[0].getsockname()[1]
    fake.address = f"127.0.0.1:{port}"
    try:
        yield fake
    finally:
        fake.server.close()
        for peer in fake.connections:
            if peer.transport is not None:
                peer.transport.abort()
        await fake.server.wait_closed()


def reference_frame(
    raw: bytes,
    *,
    tags: str | None = None,
    keys: Any = None,
    properties: dict[str, str] | None = None,
    delay_level: int = 0,
) -> bytes:
    """The frame the reference encoder builds for the send ``raw`` captured, with its opaque,
    born time and UNIQ_KEY (or, for a batch, its body)."""
    cmd = decode_frame(raw[4:])
    ext = cmd.ext_fields
    topic, qid = str(ext["b"]), int(ext["e"])
    mq = MessageQueue(topic, BROKER, qid)
    batch = cmd.code == RequestCode.SEND_BATCH_MESSAGE
    if batch:
        props: dict[str, str] = {}
    else:
        props = message_properties(tags, keys, properties, delay_level)
        props["UNIQ_KEY"] = uniq_of(raw)
    want = send_request(GROUP, topic, mq, props, cmd.body, batch=batch)
    want.opaque = cmd.opaque
    want.ext_fields["g"] = ext["g"]
    return want.encode()


def uniq_of(raw: bytes) -> str:
    props = str(decode_frame(raw[4:]).ext_fields["i"])
    fields = dict(p.split("\x01", 1) for p in props.split("\x02") if p)
    return fields["UNIQ_KEY"]


def check_result(result: SendResult, raw: bytes, offset: int) -> None:
    cmd = decode_frame(raw[4:])
    qid = int(cmd.ext_fields["e"])
    assert result.status == "SEND_OK"
    assert result.queue == MessageQueue(str(cmd.ext_fields["b"]), BROKER, qid)
    assert result.queue_offset == offset
    assert result.offset_msg_id == f"7F00000100002A9F{offset:016X}"


@pytest.mark.parametrize("kind", LOOPS)
def test_plain_sends_are_the_reference_frames_over_the_queues_in_turn(kind: str) -> None:
    async def main() -> tuple[list[bytes], list[SendResult], list[str]]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                results = [await producer.send(TOPIC, bytes([i]) * 1024) for i in range(9)]
            finally:
                producer.close()
            return fake.sends, results, fake.route_requests

    before = int(time.time() * 1000)
    sends, results, routes = run(kind, main())
    after = int(time.time() * 1000)
    assert routes == [TOPIC]
    assert len(sends) == 9
    qids = [int(decode_frame(raw[4:]).ext_fields["e"]) for raw in sends]
    assert qids == [i % 4 for i in range(9)]
    ids = [uniq_of(raw) for raw in sends]
    assert len(set(ids)) == 9
    opaques = [decode_frame(raw[4:]).opaque for raw in sends]
    assert len(set(opaques)) == 9
    for i, (raw, result) in enumerate(zip(sends, results, strict=True)):
        assert raw == reference_frame(raw)
        assert decode_frame(raw[4:]).body == bytes([i]) * 1024
        assert before <= int(decode_frame(raw[4:]).ext_fields["g"]) <= after
        check_result(result, raw, i // 4)
        assert result.msg_id == ids[i]
        assert UNIQ.fullmatch(ids[i])
        assert ids[i][:20] == UNIQ_IDS._prefix
    counters = [int(u[-4:], 16) for u in ids]
    assert all((b - a) & 0xFFFF == 1 for a, b in itertools.pairwise(counters))


def test_a_frame_is_the_recorded_bytes_but_for_opaque_born_time_and_uniq_key() -> None:
    async def main() -> list[bytes]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                await producer.send(TOPIC, b"hello")
            finally:
                producer.close()
            return fake.sends

    (raw,) = run("asyncio", main())
    cmd = decode_frame(raw[4:])
    uniq = uniq_of(raw)
    header = (
        b'{"code":310,"language":"PYTHON","version":409,"opaque":%d,"flag":0,"extFields":'
        b'{"a":"frames-producer","b":"FramesTopic","c":"TBW102","d":"4","e":"%d","f":"0",'
        b'"g":"%s","h":"0","i":"UNIQ_KEY\\u0001%s\\u0002WAIT\\u0001true\\u0002","j":"0",'
        b'"k":"false","m":"false"},"serializeTypeCurrentRPC":"JSON"}'
    ) % (cmd.opaque, int(cmd.ext_fields["e"]), cmd.ext_fields["g"].encode(), uniq.encode())
    assert raw == struct.pack(">ii", 4 + len(header) + 5, len(header)) + header + b"hello"


@pytest.mark.parametrize("kind", LOOPS)
def test_sends_with_tags_keys_properties_delay_and_queues_are_the_reference_frames(
    kind: str,
) -> None:
    sends_args: list[dict[str, Any]] = [
        {"tags": "TagA"},
        {"tags": "TagA"},
        {"tags": 'Tag \u00e9\u4e2d"\\'},
        {"keys": "k1"},
        {"keys": ["k1", "k2"]},
        {"properties": {"p": "v", "q": "\u00fc"}},
        {"properties": {"UNIQ_KEY": "MYOWNID", "WAIT": "false"}},
        {"delay_level": 3},
        {"tags": "T", "keys": "K", "properties": {"a": "b"}, "delay_level": 2},
        {"tags": ["not", "text"]},  # written as the reference writes it, as before
        {"delay_level": 2.0},
    ]

    async def main() -> tuple[list[bytes], list[SendResult]]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                results = [await producer.send(TOPIC, b"m", **a) for a in sends_args]
                queue = MessageQueue(TOPIC, BROKER, 2)
                results.append(await producer.send(TOPIC, b"q", queue=queue))
                results.append(await producer.send(TOPIC, b"q", tags="X", queue=queue))
            finally:
                producer.close()
            return fake.sends, results

    sends, results = run(kind, main())
    assert len(sends) == len(sends_args) + 2
    for raw, a in zip(sends, sends_args, strict=False):
        assert raw == reference_frame(raw, **a)
    assert uniq_of(sends[6]) == "MYOWNID"
    assert results[6].msg_id == "MYOWNID"
    for raw, tags in ((sends[-2], None), (sends[-1], "X")):
        assert raw == reference_frame(raw, tags=tags)
        assert decode_frame(raw[4:]).ext_fields["e"] == "2"
    assert results[-1].queue == MessageQueue(TOPIC, BROKER, 2)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_batch_is_the_reference_frame(kind: str) -> None:
    async def main() -> tuple[list[bytes], SendResult]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                result = await producer.send_batch(TOPIC, [b"a", b"bb", b"ccc"], tags="B")
            finally:
                producer.close()
            return fake.sends, result

    (raw,), result = run(kind, main())
    assert raw == reference_frame(raw)
    assert len(result.msg_id.split(",")) == 3
    body = decode_frame(raw[4:]).body
    for uniq in result.msg_id.split(","):
        assert f"UNIQ_KEY\x01{uniq}\x02".encode() in body
    expected, _ = batch_body([b"a", b"bb", b"ccc"], "B")
    assert len(body) == len(expected)


@pytest.mark.parametrize("kind", LOOPS)
def test_many_sends_in_flight_on_one_producer_each_get_their_answer(kind: str) -> None:
    async def main() -> tuple[list[bytes], list[SendResult]]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                await producer.route(TOPIC)
                results = await asyncio.gather(
                    *(producer.send(TOPIC, str(i).encode(), tags="t") for i in range(40))
                )
            finally:
                producer.close()
            return fake.sends, list(results)

    sends, results = run(kind, main())
    assert len(sends) == 40
    by_uniq = {uniq_of(raw): raw for raw in sends}
    for i, result in enumerate(results):
        raw = by_uniq[result.msg_id]
        assert decode_frame(raw[4:]).body == str(i).encode()
        assert raw == reference_frame(raw, tags="t")
        assert int(decode_frame(raw[4:]).ext_fields["e"]) == result.queue.queue_id


@pytest.mark.parametrize("code", [ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_ERROR])
def test_a_retryable_refusal_is_sent_again_with_the_same_id_after_a_route_refresh(
    code: int,
) -> None:
    async def main() -> tuple[list[bytes], SendResult, list[str]]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                await producer.send(TOPIC, b"first")
                fake.script = [code]
                result = await producer.send(TOPIC, b"again", tags="R")
            finally:
                producer.close()
            return fake.sends, result, fake.route_requests

    sends, result, routes = run("asyncio", main())
    assert len(sends) == 3
    assert routes == [TOPIC, TOPIC]
    assert uniq_of(sends[1]) == uniq_of(sends[2]) == result.msg_id
    assert decode_frame(sends[1][4:]).opaque != decode_frame(sends[2][4:]).opaque
    for raw in sends[1:]:
        assert raw == reference_frame(raw, tags="R")
    assert result.status == "SEND_OK"


def test_a_refusal_that_is_not_retryable_raises_at_once() -> None:
    async def main() -> tuple[list[bytes], BaseException | None]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                await producer.send(TOPIC, b"first")
                fake.script = [ResponseCode.MESSAGE_ILLEGAL]
                try:
                    await producer.send(TOPIC, b"bad")
                except ClientError as exc:
                    return fake.sends, exc
                return fake.sends, None
            finally:
                producer.close()

    sends, exc = run("asyncio", main())
    assert isinstance(exc, ClientError)
    assert exc.code == ResponseCode.MESSAGE_ILLEGAL
    assert len(sends) == 2


def test_retries_run_out_on_refusals() -> None:
    async def main() -> tuple[list[bytes], BaseException | None]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP, retries=2)
            try:
                await producer.send(TOPIC, b"first")
                fake.script = [ResponseCode.SYSTEM_BUSY] * 3
                try:
                    await producer.send(TOPIC, b"busy")
                except ClientError as exc:
                    return fake.sends, exc
                return fake.sends, None
            finally:
                producer.close()

    sends, exc = run("asyncio", main())
    assert isinstance(exc, ClientError) and exc.code == ResponseCode.SYSTEM_BUSY
    assert len(sends) == 4
    assert len({uniq_of(raw) for raw in sends[1:]}) == 1


@pytest.mark.parametrize("kind", LOOPS)
def test_a_closed_connection_is_retried_on_a_new_one(kind: str) -> None:
    async def main() -> tuple[list[bytes], SendResult, int]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                await producer.send(TOPIC, b"first")
                fake.script = ["close"]
                result = await producer.send(TOPIC, b"second")
            finally:
                producer.close()
            return fake.sends, result, len(fake.connections)

    sends, result, connections = run(kind, main())
    assert len(sends) == 3
    assert uniq_of(sends[1]) == uniq_of(sends[2]) == result.msg_id
    assert connections == 2  # name server and broker share an address: one link, then a new one
    assert sends[2] == reference_frame(sends[2])


def test_an_unanswered_send_times_out_with_a_remoting_error() -> None:
    async def main() -> tuple[float, BaseException | None, list[bytes]]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP, timeout=0.3, retries=0)
            try:
                await producer.route(TOPIC)
                fake.script = ["silent"]
                start = time.monotonic()
                try:
                    await producer.send(TOPIC, b"lost")
                except RemotingError as exc:
                    return time.monotonic() - start, exc, fake.sends
                return time.monotonic() - start, None, fake.sends
            finally:
                producer.close()

    took, exc, sends = run("asyncio", main())
    assert isinstance(exc, RemotingError)
    assert "in 0.3 s" in str(exc)
    assert took >= 0.25  # ended by its timeout (a hang would end in the test's own)
    assert len(sends) == 1


def test_a_new_topic_goes_through_the_default_route_then_its_own() -> None:
    async def main() -> tuple[list[bytes], list[str]]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                await producer.send("NewTopic", b"one")
                await producer.send("NewTopic", b"two")
            finally:
                producer.close()
            return fake.sends, fake.route_requests

    sends, routes = run("asyncio", main())
    assert routes == ["NewTopic", "TBW102", "NewTopic"]
    assert [decode_frame(raw[4:]).ext_fields["b"] for raw in sends] == ["NewTopic"] * 2
    for raw in sends:
        assert raw == reference_frame(raw)


def test_an_expired_route_is_fetched_again() -> None:
    async def main() -> list[str]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP, route_ttl_s=0.2)
            try:
                await producer.send(TOPIC, b"one")
                await producer.send(TOPIC, b"two")
                await asyncio.sleep(0.3)
                await producer.send(TOPIC, b"three")
            finally:
                producer.close()
            return fake.route_requests

    assert run("asyncio", main()) == [TOPIC, TOPIC]


def test_a_closed_producer_fails_its_sends() -> None:
    async def main() -> BaseException | None:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP, retries=0)
            await producer.send(TOPIC, b"one")
            fake.script = ["silent"]
            pending = asyncio.ensure_future(producer.send(TOPIC, b"two"))
            await asyncio.sleep(0.05)
            producer.close()
            try:
                await pending
            except RemotingError as exc:
                return exc
            return None

    assert isinstance(run("asyncio", main()), RemotingError)


def test_plain_sends_after_the_first_take_their_header_from_the_template(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rocketstore.client._producer import SendTemplate

    templated: list[int] = []
    head = SendTemplate.head

    def counting(self: SendTemplate, opaque: int, born_ms: int, uniq: str, size: int) -> bytes:
        templated.append(opaque)
        return head(self, opaque, born_ms, uniq, size)

    monkeypatch.setattr(SendTemplate, "head", counting)

    async def main() -> list[bytes]:
        async with fake_broker() as fake:
            producer = AsyncProducer(fake.address, GROUP)
            try:
                await producer.send(TOPIC, b"route first")
                for i in range(5):
                    await producer.send(TOPIC, b"plain", tags="t" if i % 2 else None)
                await producer.send(TOPIC, b"keyed", keys="k")
            finally:
                producer.close()
            return fake.sends

    sends = run("asyncio", main())
    assert templated == [decode_frame(raw[4:]).opaque for raw in sends[1:6]]
    for i, raw in enumerate(sends[1:6]):
        assert raw == reference_frame(raw, tags="t" if i % 2 else None)

"""Servers that one client cannot knock over: compressed bodies inflate to a bounded size
(REGISTER_BROKER bodies, message bodies with the compressed flag, gRPC GZIP bodies)."""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rocketstore._inflate import (
    DEFAULT_MAX_BODY,
    GZIP,
    ZLIB_OR_GZIP,
    InflateError,
    InflateLimitError,
    inflate,
)
from rocketstore.client._consumer import plain_body
from rocketstore.grpc._convert import GrpcError, decoded_body
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.namesrv import NameServer
from rocketstore.namesrv._bodies import (
    MAX_REGISTER_BODY,
    DataVersion,
    RegisterBrokerBody,
    TopicConfigWrapper,
)
from rocketstore.namesrv._processor import body_crc32
from rocketstore.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from rocketstore.store._record import SYSFLAG_COMPRESSED, decode_message, encode_record

MiB = 1024 * 1024


def deflate_padded(data: bytes, zeros: int, *, gzip_format: bool = False) -> bytes:
    """``data`` and ``zeros`` zero bytes after it, deflated (a few KiB a GiB) without ever
    holding the zeros in memory."""
    c = zlib.compressobj(9, zlib.DEFLATED, GZIP if gzip_format else zlib.MAX_WBITS)
    out = [c.compress(data)]
    chunk = bytes(MiB)
    for _ in range(zeros // MiB):
        out.append(c.compress(chunk))
    out.append(c.compress(bytes(zeros % MiB)))
    out.append(c.flush())
    return b"".join(out)


# ---- the helper -------------------------------------------------------------------------------


def test_inflate_up_to_the_limit_and_not_a_byte_more() -> None:
    data = bytes(range(256)) * 40
    packed = zlib.compress(data)
    assert inflate(packed, len(data)) == data
    with pytest.raises(InflateLimitError, match=f"more than {len(data) - 1} bytes") as info:
        inflate(packed, len(data) - 1, what="the body")
    assert info.value.limit == len(data) - 1
    assert str(info.value).startswith("the body inflates")
    assert inflate(zlib.compress(b""), 0) == b""


def test_inflate_refuses_what_is_not_deflate_or_cut_short() -> None:
    packed = zlib.compress(b"hello world" * 100)
    with pytest.raises(InflateError, match="does not inflate"):
        inflate(b"not deflate at all", MiB)
    with pytest.raises(InflateError, match="cut short"):
        inflate(packed[:-6], MiB)
    with pytest.raises(InflateError):
        inflate(gzip.compress(b"x"), MiB)  # gzip where zlib is expected
    assert not isinstance(InflateError("x"), InflateLimitError)
    assert isinstance(InflateLimitError("x", 1), ValueError)


def test_inflate_gzip_and_its_members() -> None:
    assert inflate(gzip.compress(b"ab"), 2, wbits=GZIP) == b"ab"
    two = gzip.compress(b"ab") + gzip.compress(b"cd")
    assert inflate(two, 4, wbits=ZLIB_OR_GZIP) == b"abcd"
    with pytest.raises(InflateLimitError):  # the limit counts every member
        inflate(two, 3, wbits=ZLIB_OR_GZIP)
    assert inflate(zlib.compress(b"ab"), 2, wbits=ZLIB_OR_GZIP) == b"ab"


def test_a_bomb_stops_at_the_limit_at_once() -> None:
    bomb = deflate_padded(b"", 256 * MiB)
    assert len(bomb) < 300_000
    start = time.perf_counter()
    with pytest.raises(InflateLimitError):
        inflate(bomb, MiB)
    assert time.perf_counter() - start < 0.5  # what 1 MiB takes, not 256 MiB


# ---- message bodies ---------------------------------------------------------------------------


def compressed_message(packed: bytes) -> Any:
    raw = encode_record(topic="T", body=packed, sys_flag=SYSFLAG_COMPRESSED)
    return decode_message(raw, 0, len(raw))


def test_a_compressed_message_body_inflates_within_the_max_message_size() -> None:
    text = b"a body the producer compressed " * 200
    msg = compressed_message(zlib.compress(text))
    assert msg.decompressed_body() == text
    assert plain_body(msg).body == text
    assert plain_body(msg).sys_flag & SYSFLAG_COMPRESSED == 0

    bomb = compressed_message(deflate_padded(b"x", DEFAULT_MAX_BODY))
    with pytest.raises(InflateLimitError, match=f"more than {DEFAULT_MAX_BODY} bytes"):
        bomb.decompressed_body()
    with pytest.raises(InflateLimitError):
        plain_body(bomb)
    assert len(bomb.decompressed_body(DEFAULT_MAX_BODY + 1)) == DEFAULT_MAX_BODY + 1
    with pytest.raises(InflateError):
        compressed_message(b"\x78\x9cgarbage").decompressed_body()


def test_a_grpc_gzip_body_inflates_within_the_max_message_size() -> None:
    def message(body: bytes) -> pb.Message:
        m = pb.Message(body=body)
        m.system_properties.body_encoding = pb.GZIP
        return m

    assert decoded_body(message(gzip.compress(b"hello")), 5) == b"hello"
    assert decoded_body(message(zlib.compress(b"hello")), 5) == b"hello"
    for bomb in (
        deflate_padded(b"", 64 * MiB, gzip_format=True),
        deflate_padded(b"", 64 * MiB),
    ):
        with pytest.raises(GrpcError) as info:
            decoded_body(message(bomb), 4 * MiB)
        assert info.value.code == pb.Code.MESSAGE_BODY_TOO_LARGE
        assert "cannot exceed 4194304" in info.value.message
    with pytest.raises(GrpcError) as info:
        decoded_body(message(b"\x1f\x8bnot gzip"), MiB)
    assert info.value.code == pb.Code.MESSAGE_CORRUPTED


# ---- REGISTER_BROKER --------------------------------------------------------------------------


def run(main: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(main(), timeout))


def register_command(body: bytes, broker_name: str = "b") -> RemotingCommand:
    ext = {
        "brokerName": broker_name,
        "brokerAddr": f"127.0.0.1:{10911 + len(broker_name)}",
        "clusterName": "C",
        "haServerAddr": "127.0.0.1:2",
        "brokerId": "0",
        "compressed": "true",
        "bodyCrc32": str(body_crc32(body)),
    }
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)


def register_body(topic: str, padding: int = 0) -> bytes:
    """A compressed RegisterBrokerBody for ``topic``, followed by ``padding`` zero bytes (which
    a decoder that inflates everything reads past without a complaint)."""
    table = {topic: {"topicName": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    wrapper = TopicConfigWrapper(DataVersion(1_700_000_000_000, 1), table)
    raw = zlib.decompress(RegisterBrokerBody(wrapper).encode(compressed=True))
    return deflate_padded(raw, padding)


async def invoke(client: RemotingClient, addr: str, cmd: RemotingCommand) -> RemotingCommand:
    return await asyncio.to_thread(client.invoke, addr, cmd)


def test_a_zip_bomb_registration_is_refused_quickly_and_the_name_server_serves_on() -> None:
    bomb = register_body("Bomb", 2 * MAX_REGISTER_BODY)  # 128 MiB of zeros in some 130 KB

    async def main() -> None:
        async with NameServer(port=0) as ns:
            with RemotingClient(timeout=10) as client:
                start = time.perf_counter()
                refused = await invoke(client, ns.address, register_command(bomb))
                took = time.perf_counter() - start
                assert refused.code == ResponseCode.SYSTEM_ERROR
                assert f"inflates to more than {MAX_REGISTER_BODY} bytes" in (refused.remark or "")
                assert took < 5.0  # inflating 64 MiB, not 128
                assert ns.routes.route("Bomb") is None
                ok = await invoke(client, ns.address, register_command(register_body("T"), "b2"))
                assert ok.code == ResponseCode.SUCCESS
                assert ns.routes.route("T") is not None

    run(main)


def test_the_register_body_limit_is_the_name_servers_to_set() -> None:
    async def main() -> None:
        async with NameServer(port=0, max_register_body=MiB) as ns:
            with RemotingClient(timeout=10) as client:
                big = await invoke(client, ns.address, register_command(register_body("A", MiB)))
                assert big.code == ResponseCode.SYSTEM_ERROR
                assert f"more than {MiB} bytes" in (big.remark or "")
                fits = register_body("B", MiB // 2)
                ok = await invoke(client, ns.address, register_command(fits, "b2"))
                assert ok.code == ResponseCode.SUCCESS
                assert ns.routes.route("A") is None and ns.routes.route("B") is not None

    run(main)

"""The gRPC protocol definitions agree with the official Python client's.

``rocketmq-python-client`` (RocketMQ 5.x) ships its own generated modules. It registers the same
message names as ours under other proto file names, so the two cannot share a process: the client
runs in a venv of its own, made once and cached under ``~/.cache/rocketstore-interop/`` (or
``$ROCKETSTORE_INTEROP_CACHE``), and hands its descriptors over as bytes. The tests skip only when
pip cannot install the client.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.protobuf", reason="protobuf is not installed (the server extra)")
pytest.importorskip("grpc", reason="grpcio is not installed (the server extra)")

from google.protobuf import descriptor_pb2, text_format
from google.protobuf.message import Message

from rocketstore.grpc._pb import definition_pb2, service_pb2, service_pb2_grpc
from support.grpc_client import RUN_TIMEOUT_S, client_venv

PROTO_DIR = Path(__file__).resolve().parents[1] / "src" / "rocketstore" / "grpc" / "proto"
PACKAGE = "apache.rocketmq.v2"

# What our definitions have beyond the client's 5.1.2 modules: fields added to the protocol
# since (apache/rocketmq-apis: Settings.client_properties, Code.INVALID_CLIENT_PROPERTIES).
NEWER_THAN_CLIENT = {
    ("field", f"{PACKAGE}.Settings", "client_properties"),
    ("message", f"{PACKAGE}.Settings.ClientPropertiesEntry"),
    ("field", f"{PACKAGE}.Settings.ClientPropertiesEntry", "key"),
    ("field", f"{PACKAGE}.Settings.ClientPropertiesEntry", "value"),
    ("enum_value", f"{PACKAGE}.Code", "INVALID_CLIENT_PROPERTIES"),
}


@pytest.fixture(scope="module")
def client_python() -> Iterator[Path]:
    yield client_venv()  # a skip here is remembered for the whole module


def _run_client(python: Path, script: str, *args: str) -> list[str]:
    result = subprocess.run(
        [str(python), "-c", script, *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    return result.stdout.splitlines()


_DUMP_CLIENT_DESCRIPTORS = """
import base64
from rocketmq.grpc_protocol import definition_pb2, service_pb2
for module in (definition_pb2, service_pb2):
    print(base64.b64encode(module.DESCRIPTOR.serialized_pb).decode())
"""

_PROTOC_DESCRIPTOR_SET = """
import base64, sys, tempfile, os
from grpc_tools import protoc
import grpc_tools
include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
out = os.path.join(tempfile.mkdtemp(), "set.pb")
proto_dir = sys.argv[1]
files = [os.path.join(proto_dir, "apache/rocketmq/v2", n) for n in ("definition.proto", "service.proto")]
rc = protoc.main(["protoc", "-I" + proto_dir, "-I" + include, "--descriptor_set_out=" + out] + files)
if rc != 0:
    raise SystemExit("protoc failed")
print(base64.b64encode(open(out, "rb").read()).decode())
"""


def _files(blobs: Iterable[str]) -> list[descriptor_pb2.FileDescriptorProto]:
    return [descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(b)) for b in blobs]


def _ours() -> list[descriptor_pb2.FileDescriptorProto]:
    return [
        descriptor_pb2.FileDescriptorProto.FromString(m.DESCRIPTOR.serialized_pb)
        for m in (definition_pb2, service_pb2)
    ]


def _summary(files: Iterable[descriptor_pb2.FileDescriptorProto]) -> dict[tuple[str, ...], Any]:
    """Everything of the protocol that reaches the wire or the generated API, by full name:
    messages, fields (number, label, type, type name, oneof, explicit presence), enum values
    and methods (types, streaming)."""
    out: dict[tuple[str, ...], Any] = {}

    def enum(e: descriptor_pb2.EnumDescriptorProto, scope: str) -> None:
        name = f"{scope}.{e.name}"
        out[("enum", name)] = True
        for v in e.value:
            out[("enum_value", name, v.name)] = v.number

    def message(m: descriptor_pb2.DescriptorProto, scope: str) -> None:
        name = f"{scope}.{m.name}"
        out[("message", name)] = m.options.map_entry
        for f in m.field:
            oneof = m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
            out[("field", name, f.name)] = (
                f.number,
                f.label,
                f.type,
                f.type_name,
                oneof,
                f.proto3_optional,
            )
        for nested in m.nested_type:
            message(nested, name)
        for nested_enum in m.enum_type:
            enum(nested_enum, name)

    for file in files:
        assert file.package == PACKAGE
        assert file.syntax == "proto3"
        for m in file.message_type:
            message(m, PACKAGE)
        for e in file.enum_type:
            enum(e, PACKAGE)
        for s in file.service:
            service = f"{PACKAGE}.{s.name}"
            out[("service", service)] = True
            for method in s.method:
                out[("method", service, method.name)] = (
                    method.input_type,
                    method.output_type,
                    method.client_streaming,
                    method.server_streaming,
                )
    return out


def test_every_element_of_the_clients_protocol_is_ours_with_the_same_number_and_type(
    client_python: Path,
) -> None:
    theirs = _summary(_files(_run_client(client_python, _DUMP_CLIENT_DESCRIPTORS)))
    ours = _summary(_ours())
    assert len(theirs) > 400  # the dump really holds the protocol
    missing = sorted(k for k in theirs if k not in ours)
    different = sorted(
        (k, ours[k], theirs[k]) for k in theirs if k in ours and ours[k] != theirs[k]
    )
    assert missing == []
    assert different == []
    assert set(ours) - set(theirs) == NEWER_THAN_CLIENT


def test_checked_in_modules_are_generated_from_the_proto_files(client_python: Path) -> None:
    """protoc (the client venv's grpcio-tools) compiles proto/ to what _pb/ holds."""
    (blob,) = _run_client(client_python, _PROTOC_DESCRIPTOR_SET, str(PROTO_DIR))
    compiled = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(blob))
    ours_files = {f.name: f for f in compiled.file if f.package == PACKAGE}
    assert sorted(ours_files) == [
        "apache/rocketmq/v2/definition.proto",
        "apache/rocketmq/v2/service.proto",
    ]
    assert _summary(ours_files.values()) == _summary(_ours())


_CLIENT_ROUND_TRIP = """
import base64, sys
from google.protobuf import text_format
from rocketmq.grpc_protocol import service_pb2
for kind, blob in zip(sys.argv[1::2], sys.argv[2::2]):
    message = getattr(service_pb2, kind).FromString(base64.b64decode(blob))
    print(text_format.MessageToString(message, as_one_line=True))
    print(base64.b64encode(message.SerializeToString(deterministic=True)).decode())
"""


def test_messages_round_trip_through_the_client(client_python: Path) -> None:
    received = service_pb2.ReceiveMessageResponse()
    msg = received.message
    msg.topic.name = "TopicA"
    msg.user_properties["k"] = "v"
    msg.body = b"hello"
    props = msg.system_properties
    props.tag = "TagA"
    props.keys.extend(["k1", "k2"])
    props.message_id = "01ABC"
    props.body_digest.type = definition_pb2.DigestType.CRC32
    props.body_digest.checksum = "3610A686"
    props.body_encoding = definition_pb2.Encoding.IDENTITY
    props.message_type = definition_pb2.MessageType.NORMAL
    props.born_timestamp.FromMilliseconds(1_700_000_000_123)
    props.receipt_handle = "handle"
    props.queue_id = 3
    props.queue_offset = 42
    props.invisible_duration.FromMilliseconds(30_000)
    props.delivery_attempt = 2
    telemetry = service_pb2.TelemetryCommand()
    telemetry.status.code = definition_pb2.Code.OK
    settings = telemetry.settings
    settings.client_type = definition_pb2.ClientType.SIMPLE_CONSUMER
    settings.backoff_policy.max_attempts = 17
    settings.backoff_policy.customized_backoff.next.add().FromSeconds(1)
    settings.subscription.group.name = "G1"
    settings.subscription.receive_batch_size = 32
    settings.subscription.long_polling_timeout.FromSeconds(20)
    sent: list[tuple[str, Message]] = [
        ("ReceiveMessageResponse", received),
        ("TelemetryCommand", telemetry),
    ]
    args = []
    for kind, message in sent:
        args += [kind, base64.b64encode(message.SerializeToString(deterministic=True)).decode()]
    lines = _run_client(client_python, _CLIENT_ROUND_TRIP, *args)
    assert len(lines) == 2 * len(sent)
    for i, (_, message) in enumerate(sent):
        assert lines[2 * i] == text_format.MessageToString(message, as_one_line=True)
        echoed = type(message).FromString(base64.b64decode(lines[2 * i + 1]))
        assert echoed == message


def test_generated_modules_live_in_rocketstore() -> None:
    assert service_pb2.DESCRIPTOR.name == "apache/rocketmq/v2/service.proto"
    assert definition_pb2.DESCRIPTOR.name == "apache/rocketmq/v2/definition.proto"
    assert service_pb2.ReceiveMessageRequest.__module__ == "rocketstore.grpc._pb.service_pb2"
    assert definition_pb2.Code.Value("OK") == 20000
    assert definition_pb2.Code.Value("MESSAGE_NOT_FOUND") == 40401
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    receive = service.methods_by_name["ReceiveMessage"]
    assert (receive.client_streaming, receive.server_streaming) == (False, True)
    assert callable(service_pb2_grpc.add_MessagingServiceServicer_to_server)
    assert service_pb2_grpc.MessagingServiceStub is not None

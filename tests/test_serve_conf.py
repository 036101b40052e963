"""``rocketstore serve -c broker.conf``: the conf's storePathRootDir (and storePathCommitLog)
place the store unless --store is given; a SYNC_MASTER without a slave warns at start and, at
most once a minute, while sends are stored and answered SLAVE_NOT_AVAILABLE (code 11, the
message id and queue offset, no remark: RocketMQ 4.9.8's answer)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore.cli import main as cli_main
from rocketstore.client import Producer, PullConsumer
from rocketstore.client._producer import message_properties, send_request
from rocketstore.client._route import MessageQueue
from rocketstore.remoting import RemotingClient, ResponseCode
from rocketstore.store._clock import ManualClock
from rocketstore.store.ha import _transfer
from rocketstore.store.ha._transfer import GroupTransferService
from rocketstore.store.log._message import PutMessageResult, PutMessageStatus
from support.interop import ServerProcess
from support.waits import wait_until

NOT_AVAILABLE_LINE = re.compile(r"(\d+) put\(s\) since the last warning were stored and answered")


def serve(log: Path, conf: Path, *extra: str) -> ServerProcess:
    args = [*ServerProcess._command(), "serve", "-c", str(conf), *extra]
    args += ["--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--grpc-listen", ""]
    return ServerProcess(args, log, want_namesrv=True, want_broker=True)._wait_started(30)


def commit_log_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.isdigit()) if path.is_dir() else []


@pytest.mark.parametrize("explicit_store", [False, True])
def test_conf_places_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, explicit_store: bool
) -> None:
    monkeypatch.chdir(tmp_path)  # where serve's default "store" would go
    root, commit_log = tmp_path / "conf-root", tmp_path / "conf-commitlog"
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\nstorePathCommitLog={commit_log}\n")
    extra = ["--store", str(tmp_path / "given")] if explicit_store else []
    server = serve(tmp_path / "serve.log", conf, *extra)
    try:
        assert server.namesrv is not None
        with Producer(server.namesrv) as producer:
            assert producer.send("ConfTopic", b"placed").status == "SEND_OK"
    finally:
        assert server.stop() == 0
    want = tmp_path / "given" if explicit_store else root
    assert f"store {want}" in server.output()
    assert (want / "config").is_dir() and (want / "consumequeue" / "ConfTopic").is_dir()
    assert commit_log_files(commit_log)  # the conf's commit-log directory either way
    assert not (tmp_path / "store").exists()
    if explicit_store:
        assert not root.exists()


def test_sync_master_without_a_slave(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\nbrokerRole=SYNC_MASTER\n")
    server = serve(tmp_path / "serve.log", conf)
    try:
        assert server.namesrv is not None and server.broker is not None
        # the warning may be written after the ready lines: poll for it
        assert wait_until(
            lambda: "is a SYNC_MASTER: until a slave connects" in server.output(), poll=0.05
        )
        with Producer(server.namesrv) as producer:
            results = [producer.send("SyncTopic", f"m{i}".encode()) for i in range(3)]
        assert [r.status for r in results] == ["SLAVE_NOT_AVAILABLE"] * 3
        # each stored once, at the offsets the answers gave
        by_queue: dict[MessageQueue, list[int]] = {}
        for r in results:
            by_queue.setdefault(r.queue, []).append(r.queue_offset)
        with PullConsumer(server.namesrv, "sync-check") as consumer:
            for mq, offsets in by_queue.items():
                # answered before its dispatch made the queue: readable a moment later
                assert wait_until(
                    lambda mq=mq: bool(consumer.pull(mq, 0, 32).messages)  # type: ignore[misc]
                )
                got = consumer.pull(mq, 0, 32).messages
                assert [m.queue_offset for m in got] == sorted(offsets)
        # the answer on the wire: code 11 with the id and offset, no remark
        mq = results[0].queue
        props = message_properties(None, None, None)
        with RemotingClient() as client:
            r = client.invoke(
                server.broker, send_request("g", "SyncTopic", mq, props, b"raw", batch=False)
            )
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and r.remark is None
        assert r.ext_fields["msgId"] and int(r.ext_fields["queueOffset"]) >= 0
        # one warning for the four answers, within the minute
        counts = [int(n) for n in NOT_AVAILABLE_LINE.findall(server.output())]
        assert counts == [1]
    finally:
        assert server.stop() == 0


def test_not_available_warning_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    service = GroupTransferService(
        clock,
        timeout_s=1.0,
        fallbehind_max=256 * 1024 * 1024,
        connection_count=lambda: 0,
        wake_writers=lambda: None,
    )
    put = PutMessageResult(PutMessageStatus.PUT_OK)

    def answer() -> PutMessageStatus | None:
        r = service.attach(100, put, lambda _: None)
        return None if r is None else r.status

    with caplog.at_level(logging.WARNING, logger=_transfer.__name__):
        assert [answer() for _ in range(3)] == [PutMessageStatus.SLAVE_NOT_AVAILABLE] * 3
        clock.advance(_transfer.NOT_AVAILABLE_WARN_INTERVAL_S - 1)
        answer()
        clock.advance(1)
        answer()
    counts = [int(n) for n in NOT_AVAILABLE_LINE.findall(caplog.text)]
    assert counts == [1, 4]
    assert service.not_available == 5


def test_broker_needs_a_store_from_somewhere(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-x\n")
    r = CliRunner().invoke(cli_main, ["broker", "-c", str(conf)], catch_exceptions=False)
    assert r.exit_code == 2 and "give --store, or a broker.conf (-c) with storePathRootDir" in (
        r.output
    )
    conf.write_text("storePathRootDir\n")  # not key=value
    r = CliRunner().invoke(cli_main, ["broker", "-c", str(conf)], catch_exceptions=False)
    assert r.exit_code == 2 and "expected key=value" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (
            "allAckInSyncStateSet=true    # a SYNC send waits for every member",
            "allAckInSyncStateSet",
        ),
        (
            "minInSyncReplicas=2          # and is refused while the set is smaller",
            "minInSyncReplicas",
        ),
        ("flushDiskType=SYNC_FLUSH  # every send on disk", "flushDiskType"),
    ],
)
def test_a_trailing_comment_is_named_in_the_refusal(tmp_path: Path, line: str, key: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-x\nstorePathRootDir={tmp_path / 'store'}\n{line}\n")
    r = CliRunner().invoke(cli_main, ["broker", "-c", str(conf)], catch_exceptions=False)
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert key in r.output and "comments on their own line" in r.output


def test_comments_on_their_own_lines_are_accepted(tmp_path: Path) -> None:
    from rocketstore.controller._config import ControllerConfig, ControllerConfigError
    from rocketstore.protocol._properties import java_bool, parse_properties

    assert java_bool("true") is True
    with pytest.raises(ValueError, match="comments on their own line"):
        java_bool("true # yes")
    text = "# why\nenableElectUncleanMaster=true\n"
    assert ControllerConfig.from_properties(parse_properties(text)).enable_elect_unclean_master
    with pytest.raises(ControllerConfigError, match="comments on their own line"):
        ControllerConfig.from_properties(parse_properties("enableElectUncleanMaster=true  # why\n"))

"""RocketMQ 5.1.4's own programs against rocketstore's controller: mqadmin's
getControllerMetaData, getSyncStateSet, electMaster, cleanBrokerMetadata and getControllerConfig
read and change what the controller keeps, and a 5.1.4 broker in controller mode registers with
it (an id applied for, registered, elected master of its new group) — the strongest check of
the protocol.

This project ships none of RocketMQ's classes: ``ROCKETMQ5_CLASSPATH`` names a classpath with
RocketMQ 5.1.4's tools, client, broker, store, remoting and common classes and their
dependencies (RocketMQ 5.1.4 compiled from its sources with JDK 17).
Without it, or without ``java``, the tests are skipped, saying so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocketstore.controller import ControllerConfig
from rocketstore.namesrv import NameServer
from rocketstore.server import ControllerServer
from support.controllers import CLUSTER, RunningGroup
from support.java import OPENS
from support.ports import free_broker_port
from support.processes import stop_process
from support.remoting import LoopThread

CLASSPATH = os.environ.get("ROCKETMQ5_CLASSPATH", "")
JAVA = shutil.which("java")
pytestmark = pytest.mark.skipif(
    not CLASSPATH or JAVA is None,
    reason="set ROCKETMQ5_CLASSPATH to RocketMQ 5.1.4's classes (and have java on PATH)",
)
JAVA_OPTS = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *OPENS]
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5level %logger{{32}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def _java(root: Path, main: str, *args: str) -> list[str]:
    assert JAVA is not None
    logback = root / "logback.xml"
    if not logback.exists():
        logback.write_text(_LOGBACK.format(log=root / "java.log"))
    return [
        JAVA,
        *JAVA_OPTS,
        f"-Duser.home={root / 'user-home'}",
        f"-Dlogback.configurationFile={logback}",
        "-Drocketmq.client.logRoot=" + str(root / "client-logs"),
        "-cp",
        CLASSPATH,
        main,
        *args,
    ]


def mqadmin(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _java(root, "org.apache.rocketmq.tools.command.MQAdminStartup", *args),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ROCKETMQ_HOME": str(root)},
    )


def test_mqadmin_reads_and_changes_the_controller(tmp_path: Path) -> None:
    r = RunningGroup(tmp_path)
    try:
        r.group()
        addr = r.server.address
        b = r.brokers[1]
        out = mqadmin(tmp_path, "getControllerMetaData", "-a", addr)
        assert out.returncode == 0, out.stderr
        assert "#ControllerGroup\tgroup1" in out.stdout
        assert f"#ControllerLeaderAddress\t{addr}" in out.stdout
        assert f"#Peer:\tn0:{addr}" in out.stdout
        out = mqadmin(tmp_path, "getSyncStateSet", "-a", addr, "-b", "broker-a")
        assert out.returncode == 0, out.stderr
        assert "#MasterBrokerId\t1" in out.stdout and "#MasterEpoch\t1" in out.stdout
        assert "#SyncStateSetEpoch\t2" in out.stdout and "#SyncStateSetNums\t2" in out.stdout
        assert out.stdout.count("InSyncReplica:") == 2
        out = mqadmin(
            tmp_path, "electMaster", "-a", addr, "-c", CLUSTER, "-bn", "broker-a", "-b", "2"
        )
        assert out.returncode == 0, out.stderr
        assert f"#BrokerMasterAddr\t{b.address}" in out.stdout
        assert "#MasterEpoch\t2" in out.stdout and "#SyncStateSetEpoch\t3" in out.stdout
        out = mqadmin(tmp_path, "getControllerConfig", "-a", addr)
        assert "enableElectUncleanMaster" in out.stdout, out.stdout + out.stderr
        # a group whose brokers live is not cleaned without -l
        out = mqadmin(tmp_path, "cleanBrokerMetadata", "-a", addr, "-bn", "broker-a", "-c", CLUSTER)
        assert "success" not in out.stdout
        out = mqadmin(tmp_path, "cleanBrokerMetadata", "-a", addr, "-bn", "broker-a", "-l")
        assert "clear broker broker-a metadata from controller success" in out.stdout, out.stderr
        assert r.loop.run(r.server.controller.requests.read("broker-a")) is None
    finally:
        r.stop()


def test_a_rocketmq5_broker_registers_with_the_controller(tmp_path: Path) -> None:
    loop = LoopThread()
    namesrv = NameServer("127.0.0.1", 0, kv_config_path=tmp_path / "kv.json")
    controller = ControllerServer(ControllerConfig(listen_port=0, store_path=str(tmp_path / "ctl")))
    loop.run(namesrv.start())
    loop.run(controller.start())
    port = free_broker_port()
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "".join(
            f"{k}={v}\n"
            for k, v in {
                "brokerClusterName": CLUSTER,
                "brokerName": "broker-a",
                "brokerId": "-1",
                "brokerRole": "SLAVE",
                "brokerIP1": "127.0.0.1",
                "listenPort": str(port),
                "namesrvAddr": namesrv.address,
                "enableControllerMode": "true",
                "controllerAddr": controller.address,
                "allAckInSyncStateSet": "true",
                "storePathRootDir": str(store),
                "storePathCommitLog": str(store / "commitlog"),
                "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
                "metricsExporterType": "DISABLE",
            }.items()
        )
    )
    log = open(tmp_path / "broker.out", "wb")  # noqa: SIM115 - the process owns it
    proc = subprocess.Popen(
        _java(tmp_path, "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf)),
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ROCKETMQ_HOME": str(tmp_path)},
    )
    log.close()
    try:

        async def registered() -> None:
            requests = controller.controller.requests

            async def master_known() -> bool:
                versioned = await requests.read("broker-a")
                return versioned is not None and versioned.record.master_id == 1

            for _ in range(1200):
                if await master_known():
                    break
                assert proc.poll() is None, (tmp_path / "broker.out").read_text()[-3000:]
                await asyncio.sleep(0.1)
            versioned = await requests.read("broker-a")
            assert versioned is not None, (tmp_path / "broker.out").read_text()[-3000:]
            record = versioned.record
            assert record.master_id == 1 and record.master_epoch == 1
            assert record.address_of(1) == f"127.0.0.1:{port}"
            assert controller.controller.live.is_alive(CLUSTER, "broker-a", 1)

        loop.run(registered(), timeout=150)
    finally:
        stop_process(proc)
        loop.run(controller.shutdown())
        loop.run(namesrv.close())
        loop.stop()

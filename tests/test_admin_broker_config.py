"""GET_BROKER_CONFIG (26) as RocketMQ 4.9.8's broker prints it (every key of its config objects,
its defaults for the keys rocketstore does not use, Java 8's Properties order) and
UPDATE_BROKER_CONFIG (25) writing the changed keys into the broker's config file, over
loopback."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker.admin._admin import config_texts
from rocketstore.broker.admin._config import rewrite_conf_text
from rocketstore.broker.admin._config_keys import (
    MESSAGE_STORE_CONFIG_KEYS,
    ROCKETMQ_KEYS,
    JavaHashtable,
    rocketmq_config_lines,
)
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from rocketstore.store._java_hash import java_hash_unsigned
from support.cluster import Cluster, raw_call

RC = ResponseCode


def test_java_hashtable_order() -> None:
    # capacity 11: "a".."h" sit in buckets 9, 10, 0, 1, ... 5; iteration from the last bucket
    table = JavaHashtable()
    for key in "abcdefgh":
        table.put(key, key.upper())
    assert "".join(table) == "bahgfedc"
    # the ninth key reaches the threshold (8): capacity 23, buckets 5..13
    table.put("i", "I")
    assert "".join(table) == "ihgfedcba"
    table.put("a", "new")  # an update keeps the place
    assert table.items()[-1] == ("a", "new")
    # colliding keys: the newest first in its bucket ("l" and "w": 108 % 11 == 119 % 11)
    collide = JavaHashtable()
    collide.put("l", "1")
    collide.put("w", "2")
    assert list(collide) == ["w", "l"]


def test_config_lines_use_rocketmq_defaults() -> None:
    lines = dict(rocketmq_config_lines({"brokerName": "b1", "haMasterAddress": ""}, ["myKey"]))
    assert lines["brokerName"] == "b1"
    assert lines["defaultTopicQueueNums"] == "8"
    assert lines["pullThreadPoolQueueCapacity"] == "100000"
    assert lines["sendMessageThreadPoolNums"] == str(min(os.cpu_count() or 1, 4))
    assert lines["listenPort"] == "10911" and lines["maxMsgsNumBatch"] == "64"
    assert lines["configBlackList"] == "configBlackList;brokerConfigPath"
    assert "haMasterAddress" not in lines and "dLegerGroup" not in lines
    assert "myKey" not in lines  # an extra key without a value
    store_keys = [k for k, _ in MESSAGE_STORE_CONFIG_KEYS]
    assert "warmMapedFileEnable" in store_keys and "checkCRCOnRecover" in store_keys


def test_rewrite_conf_text() -> None:
    text = "# my broker\nbrokerName = b1\n\nshortPollingTimeMills=1000\nbrokerPermission:6\n"
    assert rewrite_conf_text(
        text, {"shortPollingTimeMills": "1500", "brokerPermission": "4", "slaveReadEnable": "true"}
    ) == (
        "# my broker\nbrokerName = b1\n\nshortPollingTimeMills=1500\nbrokerPermission=4\n"
        "slaveReadEnable=true\n"
    )


def test_get_broker_config_as_rocketmq_prints_it(cluster: Cluster) -> None:
    broker = cluster.brokers["broker-a"]
    r = raw_call(broker.address, 26, {})
    assert r.code == RC.SUCCESS
    lines = [line.split("=", 1) for line in bytes(r.body).decode().splitlines()]
    keys = [k for k, _ in lines]
    config = dict(lines)
    assert len(keys) == len(config)  # each key once
    assert ROCKETMQ_KEYS - {
        "rocketmqHome",
        "namesrvAddr",
        "storePathCommitLog",
        "storePathDLedgerCommitLog",
        "readOnlyCommitLogStorePaths",
        "haMasterAddress",
        "dLegerGroup",
        "dLegerPeers",
        "dLegerSelfId",
        "preferredLeaderId",
    } <= set(keys)
    # rocketstore's settings under RocketMQ's names, its own keys too
    assert config["brokerName"] == "broker-a" and config["brokerClusterName"] == "C1"
    assert config["listenPort"] == broker.address.rpartition(":")[2]
    assert config["brokerIP1"] == config["brokerIP2"] == "127.0.0.1"
    assert config["mappedFileSizeCommitLog"] == str(256 * 1024)
    assert config["namesrvAddr"] == cluster.namesrv
    assert config["listenHost"] == "127.0.0.1" and "serverMaxConnections" in config
    # RocketMQ's keys rocketstore does not use: its defaults
    assert config["clientManageThreadPoolNums"] == "32"
    assert config["enableDLegerCommitLog"] == "false"
    assert config["heartbeatThreadPoolNums"] == str(min(32, os.cpu_count() or 1))
    assert ("rocketmqHome" in config) == ("ROCKETMQ_HOME" in os.environ)
    # Java 8 Properties' order, not sorted
    assert keys != sorted(keys)
    # a Hashtable iterates its buckets from the last: the keys' bucket numbers never rise
    capacity = 11
    while len(keys) > int(capacity * 0.75):
        capacity = capacity * 2 + 1
    buckets = [(java_hash_unsigned(k) & 0x7FFFFFFF) % capacity for k in keys]
    assert buckets == sorted(buckets, reverse=True)
    values = config_texts(broker.config, broker.store_config)
    assert set(values) - {"brokerIP1", "storePathCommitLog", "haMasterAddress", "aclFile"} <= set(
        keys
    )
    assert json.loads(r.ext_fields["version"])["counter"] == 0


def _call(addr: str, code: int, body: bytes) -> RemotingCommand:
    with RemotingClient(timeout=5) as client:
        return client.invoke(addr, RemotingCommand.request(code, {}, body=body))


def test_update_broker_config_writes_the_config_file(cluster: Cluster, tmp_path: Path) -> None:
    broker = cluster.brokers["broker-b"]
    addr = broker.address
    conf = tmp_path / "broker.conf"
    original = "# broker-b\nbrokerName=broker-b\nshortPollingTimeMills=1000\n"
    conf.write_text(original)
    started = broker.config
    broker.config = dataclasses.replace(started, config_file=str(conf))
    try:
        r = _call(addr, 25, b"shortPollingTimeMills=1500\nlongPollingEnable=false\n")
        assert (r.code, r.remark) == (RC.SUCCESS, f"applied and written to {conf}")
        assert conf.read_text() == (
            "# broker-b\nbrokerName=broker-b\nshortPollingTimeMills=1500\nlongPollingEnable=false\n"
        )
        assert broker.config.short_polling_time_mills == 1500
        assert not broker.config.long_polling_enable
        version = json.loads(raw_call(addr, 26, {}).ext_fields["version"])
        assert version["counter"] == 1
        # a restart from the file keeps them
        again = BrokerConfig.from_store_config(StoreConfig.from_broker_conf(conf))
        assert (again.short_polling_time_mills, again.long_polling_enable) == (1500, False)

        # refused updates leave the file alone
        r = _call(addr, 25, b"shortPollingTimeMills=x\n")
        assert r.code == RC.SYSTEM_ERROR
        r = _call(addr, 25, b"sendMessageThreadPoolNums=2\n")
        assert (r.code, r.remark) == (
            RC.SYSTEM_ERROR,
            "sendMessageThreadPoolNums: RocketMQ's setting, not used by this broker "
            "(GET_BROKER_CONFIG shows RocketMQ's default)",
        )
        assert "shortPollingTimeMills=1500" in conf.read_text()
        assert "sendMessageThreadPoolNums" not in conf.read_text()

        # a file that cannot be written: nothing applied
        broker.config = dataclasses.replace(
            broker.config, config_file=str(tmp_path / "gone" / "broker.conf")
        )
        r = _call(addr, 25, b"shortPollingTimeMills=2000\n")
        assert r.code == RC.SYSTEM_ERROR and "cannot write the broker config file" in r.remark
        assert broker.config.short_polling_time_mills == 1500
        assert json.loads(raw_call(addr, 26, {}).ext_fields["version"])["counter"] == 1
    finally:
        broker.config = started


@pytest.mark.parametrize(
    "value",
    ["\u0668", "1_000", " 12 ", "12 ", "\uff11\uff12", "0x10", "1.0", "+", "1e3", "12\t"],
)
def test_update_broker_config_takes_numbers_only_as_java_parses_them(
    cluster: Cluster, tmp_path: Path, value: str
) -> None:
    """Python's int() takes "\u0668" (8), "1_000" and " 12 "; RocketMQ's Integer.parseInt
    takes none of them: refused, and nothing is written into broker.conf."""
    broker = cluster.brokers["broker-b"]
    conf = tmp_path / "broker.conf"
    original = "brokerName=broker-b\nshortPollingTimeMills=1000\n"
    conf.write_text(original)
    started = broker.config
    broker.config = dataclasses.replace(started, config_file=str(conf))
    try:
        for key in ("shortPollingTimeMills", "defaultTopicQueueNums", "brokerPermission"):
            r = _call(broker.address, 25, f"{key}={value}\n".encode())
            assert r.code == RC.SYSTEM_ERROR and "is not an integer" in (r.remark or ""), r.remark
        for word in ("yes", "1", "TRUE ", "\u0442rue"):
            r = _call(broker.address, 25, f"longPollingEnable={word}\n".encode())
            assert r.code == RC.SYSTEM_ERROR and "true or false" in (r.remark or ""), r.remark
        assert conf.read_text() == original
        assert broker.config == dataclasses.replace(started, config_file=str(conf))
        # what Java takes: ASCII digits with a sign
        r = _call(broker.address, 25, b"shortPollingTimeMills=+1500\nlongPollingEnable=FALSE\n")
        assert r.code == RC.SUCCESS, r.remark
        assert broker.config.short_polling_time_mills == 1500
    finally:
        broker.config = started


def test_default_topic_queue_nums_is_rocketmqs(cluster: Cluster) -> None:
    broker = cluster.brokers["broker-a"]
    assert BrokerConfig().default_topic_queue_nums == 8
    config = dict(
        line.split("=", 1)
        for line in bytes(raw_call(broker.address, 26, {}).body).decode().splitlines()
    )
    assert config["defaultTopicQueueNums"] == "8"
    tbw = broker.topics.select("TBW102")
    assert tbw is not None and (tbw.read_queue_nums, tbw.write_queue_nums) == (8, 8)
    # a send asking for more gets the default topic's 8, one asking for 4 (the clients'
    # default, RocketMQ 5's proxy) gets 4 (created on the broker's loop, as a send is)

    async def create(topic: str, nums: str) -> int:
        config = broker.create_topic_for_send(topic, {"defaultTopicQueueNums": nums})
        assert config is not None
        return config.write_queue_nums

    assert cluster.run(create("AutoEight", "16")) == 8
    assert cluster.run(create("AutoFour", "4")) == 4

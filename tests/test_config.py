"""StoreConfig: RocketMQ's defaults, broker.conf parsing, refused values."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from rocketstore import StoreConfig, StoreConfigError

# Defaults of org.apache.rocketmq.store.config.MessageStoreConfig in RocketMQ 4.9.8, written
# out from its field initialisers (1024 * 1024 * 1024 and so on).
ROCKETMQ_DEFAULTS = {
    "mapped_file_size_commit_log": 1024 * 1024 * 1024,
    "mapped_file_size_consume_queue": 300_000 * 20,
    "flush_disk_type": "ASYNC_FLUSH",
    "flush_interval_commit_log": 500,
    "flush_commit_log_least_pages": 4,
    "flush_commit_log_thorough_interval": 1000 * 10,
    "flush_commit_log_timed": True,
    "commit_interval_commit_log": 200,
    "commit_commit_log_least_pages": 4,
    "commit_commit_log_thorough_interval": 200,
    "sync_flush_timeout": 1000 * 5,
    "flush_interval_consume_queue": 1000,
    "flush_consume_queue_least_pages": 2,
    "flush_consume_queue_thorough_interval": 1000 * 60,
    "warm_mapped_file_enable": False,
    "flush_least_pages_when_warm_mapped_file": 1024 / 4 * 16,
    "transient_store_pool_enable": False,
    "transient_store_pool_size": 5,
    "fast_fail_if_no_buffer_in_store_pool": False,
    "max_message_size": 1024 * 1024 * 4,
    "check_crc_on_recover": True,
    "broker_role": "ASYNC_MASTER",
    "max_transfer_bytes_on_message_in_memory": 1024 * 256,
    "max_transfer_count_on_message_in_memory": 32,
    "max_transfer_bytes_on_message_in_disk": 1024 * 64,
    "max_transfer_count_on_message_in_disk": 8,
    "access_message_in_memory_max_ratio": 40,
    "default_query_max_num": 32,
    "message_index_enable": True,
    "max_hash_slot_num": 5_000_000,
    "max_index_num": 5_000_000 * 4,
    "message_index_safe": False,
    "message_delay_level": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
    "flush_delay_offset_interval": 1000 * 10,
    "clean_resource_interval": 10_000,
    "delete_commit_log_files_interval": 100,
    "delete_consume_queue_files_interval": 100,
    "destroy_mapped_file_interval_forcibly": 1000 * 120,
    "redelete_hanged_file_interval": 1000 * 120,
    "delete_when": "04",
    "disk_max_used_space_ratio": 75,
    "file_reserved_time": 72,
    "clean_file_forcibly_enable": True,
    "ha_listen_port": 10912,
    "ha_send_heartbeat_interval": 1000 * 5,
    "ha_housekeeping_interval": 1000 * 20,
    "ha_transfer_batch_size": 1024 * 32,
    "os_page_cache_busy_timeout_mills": 1000,
}


@pytest.mark.parametrize(("name", "expected"), sorted(ROCKETMQ_DEFAULTS.items()))
def test_defaults_equal_rocketmq(name: str, expected: object) -> None:
    assert getattr(StoreConfig(), name) == expected


def test_default_delay_levels_in_ms() -> None:
    levels = StoreConfig().delay_levels_ms()
    assert len(levels) == 18
    assert levels[0] == 1000
    assert levels[4] == 60_000
    assert levels[-1] == 2 * 3600 * 1000


def test_frozen() -> None:
    cfg = StoreConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_message_size = 1  # type: ignore[misc]


BROKER_CONF = """\
# A broker.conf as RocketMQ ships it (conf/2m-2s-async/broker-a.properties style)
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
namesrvAddr=127.0.0.1:9876
deleteWhen=04;16
fileReservedTime=48
brokerRole=SYNC_MASTER
flushDiskType=SYNC_FLUSH

! comment in the Java properties style
storePathRootDir={root}
storePathCommitLog={root}/commitlog
mappedFileSizeCommitLog=1048576
mapedFileSizeConsumeQueue=20000
warmMapedFileEnable=true
destroyMappedFileIntervalForcibly=60000
checkCRCOnRecover=false
osPageCacheBusyTimeOutMills=3000
transientStorePoolEnable = false
  maxMessageSize = 65536
brokerIP1=10.0.0.7
listenPort=10921
autoCreateTopicEnable=true
"""


def write_conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.conf"
    path.write_text(text, encoding="utf-8")
    return path


def test_from_broker_conf_realistic(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "rmqstore"
    path = write_conf(tmp_path, BROKER_CONF.format(root=root))
    with caplog.at_level(logging.WARNING):
        cfg = StoreConfig.from_broker_conf(path)
    assert cfg.store_path_root_dir == str(root)
    assert cfg.commit_log_dir == f"{root}/commitlog"
    assert cfg.mapped_file_size_commit_log == 1048576
    assert cfg.mapped_file_size_consume_queue == 20000  # old "Maped" spelling
    assert cfg.warm_mapped_file_enable is True  # "Maped" as RocketMQ 4.x spells it
    assert cfg.destroy_mapped_file_interval_forcibly == 60000  # "Mapped" spelling
    assert cfg.check_crc_on_recover is False
    assert cfg.os_page_cache_busy_timeout_mills == 3000
    assert cfg.flush_disk_type == "SYNC_FLUSH"
    assert cfg.broker_role == "SYNC_MASTER"
    assert cfg.delete_when == "04;16"
    assert cfg.delete_when_hours() == frozenset({4, 16})
    assert cfg.file_reserved_time == 48
    assert cfg.transient_store_pool_enable is False
    assert cfg.max_message_size == 65536
    assert cfg.store_host == "10.0.0.7"
    assert cfg.store_port == 10921
    extra = cfg.extra_keys()
    assert extra == {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "namesrvAddr": "127.0.0.1:9876",
        "autoCreateTopicEnable": "true",
    }
    reported = " ".join(r.getMessage() for r in caplog.records)
    for key in extra:  # the broker's own keys: no warning (the broker warns of ignored ones)
        assert key not in reported


def test_both_maped_spellings_agree() -> None:
    old = StoreConfig.from_mapping(
        {
            "warmMapedFileEnable": "true",
            "mapedFileSizeCommitLog": "65536",
            "flushLeastPagesWhenWarmMapedFile": "8",
        }
    )
    new = StoreConfig.from_mapping(
        {
            "warmMappedFileEnable": "true",
            "mappedFileSizeCommitLog": "65536",
            "flushLeastPagesWhenWarmMappedFile": "8",
        }
    )
    assert old == new
    assert old.extra == new.extra == ()
    assert new.mapped_file_size_commit_log == 65536
    assert new.warm_mapped_file_enable is True
    assert new.flush_least_pages_when_warm_mapped_file == 8


def test_from_mapping_snake_case_and_typed_values() -> None:
    cfg = StoreConfig.from_mapping(
        {"flush_disk_type": "SYNC_FLUSH", "max_message_size": 1024, "message_index_enable": False}
    )
    assert cfg.flush_disk_type == "SYNC_FLUSH"
    assert cfg.max_message_size == 1024
    assert cfg.message_index_enable is False


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("flushDiskType=SOMETIMES_FLUSH", ["flushDiskType", "SOMETIMES_FLUSH"]),
        ("brokerRole=LEADER", ["brokerRole", "LEADER"]),
        ("maxMessageSize=4MB", ["maxMessageSize", "4MB"]),
        ("maxMessageSize=0", ["maxMessageSize", "positive"]),
        ("mappedFileSizeCommitLog=-1", ["mappedFileSizeCommitLog", "positive"]),
        ("mappedFileSizeCommitLog=100", ["mappedFileSizeCommitLog"]),
        ("warmMapedFileEnable=maybe", ["warmMapedFileEnable", "maybe"]),
        ("diskMaxUsedSpaceRatio=99", ["diskMaxUsedSpaceRatio"]),
        ("listenPort=70000", ["listenPort", "70000"]),
        ("listenPort=abc", ["listenPort: 'abc' is not an integer"]),  # not store_port
        ("messageDelayLevel=1s 5x", ["messageDelayLevel", "5x"]),
        ("deleteWhen=25", ["deleteWhen", "25"]),
        ("maxPropertiesSize=40000", ["maxPropertiesSize"]),
        ("flushCommitLogLeastPages=-2", ["flushCommitLogLeastPages"]),
        ("diskSpaceCleanForciblyRatio=high", ["diskSpaceCleanForciblyRatio", "high"]),
    ],
)
def test_wrong_values_refused_clearly(tmp_path: Path, line: str, words: list[str]) -> None:
    path = write_conf(tmp_path, f"brokerName=b\n{line}\n")
    with pytest.raises(StoreConfigError) as info:
        StoreConfig.from_broker_conf(path)
    for word in words:
        assert word in str(info.value)


def test_line_without_separator_refused(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "# ok\nbrokerName=b\njustakey\n")
    with pytest.raises(StoreConfigError, match=r"broker\.conf:3"):
        StoreConfig.from_broker_conf(path)


def test_missing_file_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="cannot read"):
        StoreConfig.from_broker_conf(tmp_path / "nope.conf")


def test_constructor_validates() -> None:
    with pytest.raises(StoreConfigError, match="flush_disk_type"):
        StoreConfig(flush_disk_type="NEVER")  # type: ignore[arg-type]
    with pytest.raises(StoreConfigError, match="sync_flush_timeout"):
        StoreConfig(sync_flush_timeout=0)


@pytest.mark.parametrize(
    ("configured", "rounded"),
    [
        (20, 20),
        (21, 40),
        (39, 40),
        (20000, 20000),
        (20001, 20020),
        (6_000_000, 6_000_000),
        (5_999_999, 6_000_000),
        (1, 20),
    ],
)
def test_consume_queue_file_size_rounds_up_to_units(configured: int, rounded: int) -> None:
    cfg = StoreConfig(mapped_file_size_consume_queue=configured)
    assert cfg.consume_queue_file_size == rounded
    assert cfg.consume_queue_file_size % 20 == 0
    assert cfg.consume_queue_file_size >= configured


def test_transient_pool_only_with_async_flush_on_master() -> None:
    assert StoreConfig(transient_store_pool_enable=True).transient_store_pool_active
    assert not StoreConfig(
        transient_store_pool_enable=True, flush_disk_type="SYNC_FLUSH"
    ).transient_store_pool_active
    assert not StoreConfig(
        transient_store_pool_enable=True, broker_role="SLAVE"
    ).transient_store_pool_active
    assert not StoreConfig().transient_store_pool_active

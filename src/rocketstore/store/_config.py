"""Store configuration: RocketMQ's MessageStoreConfig, in snake_case, frozen and validated.

Names and defaults follow RocketMQ 4.x (``flushIntervalCommitLog`` becomes
``flush_interval_commit_log``; times stay in RocketMQ's units, mostly milliseconds).
``StoreConfig.from_broker_conf`` reads the ``key=value`` files a RocketMQ broker is started
with; keys that are not store settings are kept in ``extra`` and reported.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ._errors import StoreConfigError

log = logging.getLogger(__name__)

FlushDiskType = Literal["SYNC_FLUSH", "ASYNC_FLUSH"]
BrokerRole = Literal["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]

CQ_UNIT_SIZE = 20
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

# RocketMQ spells some keys "Maped"; both spellings are accepted in broker.conf.
_CONF_ALIASES = {
    "warmMapedFileEnable": "warm_mapped_file_enable",
    "destroyMapedFileIntervalForcibly": "destroy_mapped_file_interval_forcibly",
    "flushLeastPagesWhenWarmMapedFile": "flush_least_pages_when_warm_mapped_file",
    "brokerIP1": "store_host",
    "listenPort": "store_port",
    "osPageCacheBusyTimeOutMills": "os_page_cache_busy_timeout_mills",
}


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Settings of one message store. Immutable; use ``dataclasses.replace`` to derive."""

    store_path_root_dir: str = str(Path.home() / "store")
    store_path_commit_log: str = ""  # "" → <root>/commitlog
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT_SIZE
    # flushing and committing
    flush_disk_type: FlushDiskType = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_commit_log_timed: bool = True
    commit_interval_commit_log: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: int = 200
    sync_flush_timeout: int = 5000
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    # mapped files
    warm_mapped_file_enable: bool = False
    flush_least_pages_when_warm_mapped_file: int = 4096
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    fast_fail_if_no_buffer_in_store_pool: bool = False
    mlock_write_buffers: bool = True
    allocate_mapped_file_enable: bool = True
    # not a RocketMQ setting: store files are sparse and get their disk blocks this many bytes
    # ahead of the writes (a full disk then refuses puts instead of killing the process)
    mapped_file_allocate_ahead: int = 4 * 1024 * 1024
    # not a RocketMQ setting: how many consume-queue files may be mapped at once (idle ones
    # are unmapped beyond it and mapped again when read); 0 = what vm.max_map_count and the
    # open-file limit allow (see store/log/_mapping_lru.py)
    max_mapped_queue_files: int = 0
    # messages
    max_message_size: int = 4 * 1024 * 1024
    max_properties_size: int = 32767
    check_crc_on_recover: bool = True
    broker_role: BrokerRole = "ASYNC_MASTER"
    store_host: str = "127.0.0.1"
    store_port: int = 10911
    # dispatch: in the put path (ASYNC_FLUSH without write buffers on a master), or always on
    # the dispatch thread as RocketMQ does (not a RocketMQ setting)
    dispatch_in_put_path: bool = True
    # with dispatch_in_put_path: a record whose consume queue needs file work first (a queue
    # to make, a file to add, open or map) is dispatched in the put path too (True: readable
    # when the put returns), or the put answers and the dispatch thread takes over until it
    # has caught up, as RocketMQ's dispatch always runs apart from the put (False)
    queue_files_in_put_path: bool = False
    # reading
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    default_query_max_num: int = 32
    # index
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_safe: bool = False
    # delayed messages
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    flush_delay_offset_interval: int = 10_000
    # cleaning
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 120_000
    redelete_hanged_file_interval: int = 120_000
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    file_reserved_time: int = 72
    clean_file_forcibly_enable: bool = True
    disk_space_warning_level_ratio: float = 0.90
    disk_space_clean_forcibly_ratio: float = 0.85
    # replication
    ha_listen_port: int = 10912
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    # not RocketMQ settings: whether an ASYNC_MASTER listens for slaves (a SYNC_MASTER always
    # does; a broker turns it on, an embedded store opens no port unless asked), the address
    # it listens on, and how often a slave tries to reach its master again (RocketMQ: 5 s)
    ha_enable: bool = False
    ha_listen_host: str = "127.0.0.1"
    ha_reconnect_interval: int = 5000
    # controller mode (RocketMQ 5): the role comes from the controller, replication is
    # AutoSwitch HA with an epoch file; a SYNC put is acknowledged once min_in_sync_replicas
    # replicas of the SyncStateSet hold it (every one of them with all_ack_in_sync_state_set)
    # and refused while the set is smaller; a slave behind for ha_max_time_slave_not_catchup
    # ms leaves the set
    enable_controller_mode: bool = False
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    ha_max_time_slave_not_catchup: int = 15_000
    store_path_epoch_file: str = ""  # "" → <root>/epochFileCheckpoint
    sync_from_last_file: bool = False
    # os page cache
    os_page_cache_busy_timeout_mills: int = 1000
    # the tiered store (not RocketMQ settings): where sealed commit-log files are kept as
    # Parquet ("" = off), a last file counted as sealed once this idle (0 = only full files),
    # how long and how much the tier keeps (0 = no limit)
    tiered_dir: str = ""
    tiered_seal_age_ms: int = 0
    tiered_retention_hours: int = 0
    tiered_max_bytes: int = 0
    # keys of a broker.conf that are not store settings, kept as read
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            if getattr(self, name) <= 0:
                raise StoreConfigError(f"{name} must be positive, got {getattr(self, name)!r}")

        for name in (
            "mapped_file_size_commit_log",
            "mapped_file_size_consume_queue",
            "max_message_size",
            "sync_flush_timeout",
            "flush_interval_commit_log",
            "commit_interval_commit_log",
            "flush_interval_consume_queue",
            "max_hash_slot_num",
            "max_index_num",
            "transient_store_pool_size",
            "clean_resource_interval",
            "ha_send_heartbeat_interval",
            "ha_housekeeping_interval",
            "ha_transfer_batch_size",
            "ha_slave_fallbehind_max",
            "ha_reconnect_interval",
            "mapped_file_allocate_ahead",
            "in_sync_replicas",
            "min_in_sync_replicas",
            "ha_max_time_slave_not_catchup",
        ):
            positive(name)
        if self.flush_disk_type not in ("SYNC_FLUSH", "ASYNC_FLUSH"):
            raise StoreConfigError(
                f"flush_disk_type must be SYNC_FLUSH or ASYNC_FLUSH, got {self.flush_disk_type!r}"
            )
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise StoreConfigError(
                f"broker_role must be ASYNC_MASTER, SYNC_MASTER or SLAVE, got {self.broker_role!r}"
            )
        if self.mapped_file_size_commit_log % 4096 and self.mapped_file_size_commit_log < 4096:
            raise StoreConfigError("mapped_file_size_commit_log must be at least 4096 bytes")
        if not 0 < self.max_properties_size <= 32767:
            raise StoreConfigError("max_properties_size must be in 1..32767")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise StoreConfigError("disk_max_used_space_ratio must be in 10..95")
        if not 0 < self.store_port < 65536:
            raise StoreConfigError(f"store_port out of range: {self.store_port}")
        if not 0 <= self.ha_listen_port < 65536:
            raise StoreConfigError(f"ha_listen_port out of range: {self.ha_listen_port}")
        for name in (
            "flush_commit_log_least_pages",
            "commit_commit_log_least_pages",
            "tiered_seal_age_ms",
            "tiered_retention_hours",
            "tiered_max_bytes",
            "max_mapped_queue_files",
        ):
            if getattr(self, name) < 0:
                raise StoreConfigError(f"{name} must not be negative")
        self.delay_levels_ms()  # validates the level table
        self.delete_when_hours()

    # ---- derived values -------------------------------------------------------------------

    @property
    def commit_log_dir(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def epoch_file_path(self) -> str:
        return self.store_path_epoch_file or os.path.join(
            self.store_path_root_dir, "epochFileCheckpoint"
        )

    @property
    def consume_queue_file_size(self) -> int:
        """The consume-queue file size, rounded up to a whole number of 20-byte units."""
        units = -(-self.mapped_file_size_consume_queue // CQ_UNIT_SIZE)
        return units * CQ_UNIT_SIZE

    @property
    def ha_listens(self) -> bool:
        """A master that accepts slaves: every SYNC_MASTER, an ASYNC_MASTER with ha_enable."""
        return self.broker_role == "SYNC_MASTER" or (
            self.broker_role == "ASYNC_MASTER" and self.ha_enable
        )

    @property
    def transient_store_pool_active(self) -> bool:
        """Write buffers are used only with async flush on a master (as in RocketMQ), and
        not in controller mode (a role change would have to hand the buffers over)."""
        return (
            self.transient_store_pool_enable
            and not self.enable_controller_mode
            and self.flush_disk_type == "ASYNC_FLUSH"
            and self.broker_role != "SLAVE"
        )

    def delay_levels_ms(self) -> tuple[int, ...]:
        """The delay-level table in milliseconds; level n is element n-1."""
        levels = []
        for token in self.message_delay_level.split():
            m = re.fullmatch(r"(\d+)([smhd])", token)
            if not m:
                raise StoreConfigError(
                    f"message_delay_level: {token!r} is not a number followed by s, m, h or d"
                )
            levels.append(int(m.group(1)) * _DELAY_UNITS_MS[m.group(2)])
        if not levels:
            raise StoreConfigError("message_delay_level must name at least one level")
        return tuple(levels)

    def delete_when_hours(self) -> frozenset[int]:
        hours = set()
        for token in self.delete_when.split(";"):
            token = token.strip()
            if not token:
                continue
            if not token.isdigit() or not 0 <= int(token) <= 23:
                raise StoreConfigError(f"delete_when: {token!r} is not an hour 00..23")
            hours.add(int(token))
        return frozenset(hours)

    def extra_keys(self) -> dict[str, str]:
        return dict(self.extra)

    # ---- broker.conf ----------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> StoreConfig:
        """Build from RocketMQ camelCase or snake_case keys with string or typed values."""
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        extra: list[tuple[str, str]] = []
        for raw_key, raw_value in values.items():
            name = _CONF_ALIASES.get(raw_key) or _snake(raw_key)
            if name not in known and "maped" in name:
                name = name.replace("maped", "mapped")  # old RocketMQ spelling
            if name not in known:
                extra.append((raw_key, str(raw_value)))
                continue
            kwargs[name] = _convert(name, hints[name], raw_value, raw_key)
        if "store_port" in kwargs and "ha_listen_port" not in kwargs:
            # RocketMQ's broker listens for slaves on its own port + 1
            kwargs["ha_listen_port"] = kwargs["store_port"] + 1
        if extra:
            log.debug(  # the broker warns of the keys nothing acts on
                "broker configuration keys that are not store settings, kept in extra: %s",
                ", ".join(k for k, _ in extra),
            )
        try:
            return cls(**kwargs, extra=tuple(extra))
        except StoreConfigError as exc:  # named as the configuration spelt it
            text = str(exc)
            for raw_key in values:
                name = _CONF_ALIASES.get(raw_key) or _snake(raw_key).replace("maped", "mapped")
                if name != raw_key and re.match(rf"{name}\b", text):
                    raise StoreConfigError(raw_key + text[len(name) :]) from None
            raise

    @classmethod
    def from_broker_conf(cls, path: str | os.PathLike[str]) -> StoreConfig:
        """Read a RocketMQ broker.conf (``key=value`` lines, ``#`` comments)."""
        values: dict[str, str] = {}
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise StoreConfigError(f"cannot read broker configuration {path}: {exc}") from exc
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if sep <= 0:
                raise StoreConfigError(f"{path}:{lineno}: expected key=value, got {line!r}")
            values[line[:sep].strip()] = line[sep + 1 :].strip()
        return cls.from_mapping(values)


def _snake(name: str) -> str:
    if "_" in name or name.islower():
        return name
    # "checkCRCOnRecover" → "check_crc_on_recover": an acronym is one word
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def comment_hint(value: object) -> str:
    """The words an error about a refused value adds when the value carries what looks like a
    trailing comment: a properties file (broker.conf, namesrv.conf, controller.conf) keeps
    ``true    # why`` whole as the value, as Java's ``Properties`` does."""
    text = str(value)
    if re.search(r"\s#", text):
        return " (a properties file keeps a trailing '# ...' as part of the value: put comments on their own line)"
    return ""


def _convert(name: str, hint: Any, value: Any, key: str | None = None) -> Any:
    """``value`` as field ``name``'s type; StoreConfigError naming ``key`` (the key as the
    configuration spelt it: broker.conf's ``listenPort`` for ``store_port``) when it is not."""
    label = key or name
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        text = str(value).strip()
        if text not in allowed:
            raise StoreConfigError(
                f"{label}: {text!r} is not one of {', '.join(allowed)}{comment_hint(text)}"
            )
        return text
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise StoreConfigError(f"{label}: {value!r} is not true or false{comment_hint(value)}")
    if hint is int:
        if isinstance(value, bool):
            raise StoreConfigError(f"{label}: expected an integer, got {value!r}")
        try:
            return int(str(value).strip())
        except ValueError:
            raise StoreConfigError(
                f"{label}: {value!r} is not an integer{comment_hint(value)}"
            ) from None
    if hint is float:
        try:
            return float(str(value).strip())
        except ValueError:
            raise StoreConfigError(
                f"{label}: {value!r} is not a number{comment_hint(value)}"
            ) from None
    if hint is str or isinstance(hint, types.UnionType):
        if name in ("store_path_root_dir", "store_path_commit_log", "tiered_dir"):
            return os.path.expanduser(str(value).strip())
        return str(value).strip()
    return value

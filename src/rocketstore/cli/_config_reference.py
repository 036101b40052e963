"""``rocketstore config-keys``: every key of broker.conf, controller.conf and namesrv.conf, its
default, whether rocketstore acts on it and what it does, as Markdown. docs/configuration.md is
this command's output (``tests/test_config_reference.py`` keeps it current).

The keys come from the configuration tables themselves: the store's settings
(``StoreConfig``'s fields under their broker.conf names), the broker's (``broker_conf_keys``),
RocketMQ 4.9.8's broker keys with its defaults (``ROCKETMQ_CONFIG_OBJECTS``: those rocketstore
does not act on are accepted and named in one warning at start) and the controller's
(``ControllerConfig``). Only the words of what a key does are written here, in ``WHAT``.

Pure functions; any thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import click

WHAT: dict[str, str] = {
    # -- the store: files and flushing
    "storePathRootDir": "the store directory (commitlog/, consumequeue/, index/, config/, checkpoint)",
    "storePathCommitLog": "the commit log's directory (empty: `<root>/commitlog`)",
    "mappedFileSizeCommitLog": "bytes of one commit-log file",
    "mappedFileSizeConsumeQueue": "bytes of one consume-queue file (a multiple of the 20-byte unit)",
    "flushDiskType": "ASYNC_FLUSH, or SYNC_FLUSH: a send is answered once on disk",
    "flushIntervalCommitLog": "ms between two flushes of the commit log (ASYNC_FLUSH)",
    "flushCommitLogLeastPages": "pages a flush waits for, unless the thorough interval passed",
    "flushCommitLogThoroughInterval": "ms after which a flush writes whatever is dirty",
    "flushCommitLogTimed": "flush on the interval (true) or when woken by puts (false)",
    "commitIntervalCommitLog": "ms between two commits of the write buffers (transientStorePoolEnable)",
    "commitCommitLogLeastPages": "pages a commit of the write buffers waits for",
    "commitCommitLogThoroughInterval": "ms after which a commit writes whatever is buffered",
    "syncFlushTimeout": "ms a SYNC_FLUSH send waits for its flush before FLUSH_DISK_TIMEOUT",
    "flushIntervalConsumeQueue": "ms between two flushes of the consume queues",
    "flushConsumeQueueLeastPages": "pages a consume-queue flush waits for",
    "flushConsumeQueueThoroughInterval": "ms after which a consume-queue flush writes all",
    "warmMapedFileEnable": "touch every page of a new commit-log file before use",
    "flushLeastPagesWhenWarmMapedFile": "pages flushed at a time while warming a file",
    "transientStorePoolEnable": "write messages into off-heap buffers committed to the files",
    "transientStorePoolSize": "number of write buffers",
    "fastFailIfNoBufferInStorePool": "refuse a put at once when no write buffer is free",
    "mlockWriteBuffers": "lock the write buffers in memory",
    "allocateMappedFileEnable": "make the next commit-log file ahead of need, on a thread",
    "mappedFileAllocateAhead": "bytes of disk reserved ahead of the writes, so a full disk "
    "refuses puts instead of failing a write",
    "maxMappedQueueFiles": "consume-queue files mapped at once (idle ones unmapped and mapped "
    "again when read); 0: what vm.max_map_count and the open-file limit allow",
    "maxMessageSize": "the largest message body a send may carry, in bytes",
    "maxPropertiesSize": "the largest properties text of a message, in bytes",
    "checkCRCOnRecover": "check the body CRC of every record recovery reads",
    "brokerRole": "ASYNC_MASTER, SYNC_MASTER (a send waits for a slave) or SLAVE",
    "brokerIP1": "the address clients reach this broker at",
    "listenPort": "the remoting port (the HA port is this + 1)",
    "dispatchInPutPath": "build consume-queue units in the put path rather than on the "
    "dispatch thread",
    "queueFilesInPutPath": "with dispatchInPutPath, make, add, open or map a queue's files in "
    "the put path too (a new queue's message readable when its send returns) rather than on "
    "the dispatch thread",
    "maxTransferBytesOnMessageInMemory": "bytes one pull answers from memory at most",
    "maxTransferCountOnMessageInMemory": "messages one pull answers from memory at most",
    "maxTransferBytesOnMessageInDisk": "bytes one pull answers from disk at most",
    "maxTransferCountOnMessageInDisk": "messages one pull answers from disk at most",
    "accessMessageInMemoryMaxRatio": "percent of memory below which a message counts as in memory",
    "defaultQueryMaxNum": "messages a key query answers at most",
    "messageIndexEnable": "keep the key index",
    "maxHashSlotNum": "hash slots of one index file",
    "maxIndexNum": "entries of one index file",
    "messageIndexSafe": "recover the index from the last flushed checkpoint only",
    "messageDelayLevel": "the delay levels of delayed messages",
    "flushDelayOffsetInterval": "ms between two writes of delayOffset.json",
    "cleanResourceInterval": "ms between two rounds of file cleaning",
    "deleteCommitLogFilesInterval": "ms between deleting two expired commit-log files",
    "deleteConsumeQueueFilesInterval": "ms between deleting two expired consume-queue files",
    "destroyMapedFileIntervalForcibly": "ms after which a file still in use is deleted anyway",
    "redeleteHangedFileInterval": "ms between two tries to delete a file that did not go",
    "deleteWhen": "the hours files expire in (`04`, `01;13`)",
    "diskMaxUsedSpaceRatio": "percent of the disk the commit log may use before expired "
    "files go at once",
    "fileReservedTime": "hours a commit-log file is kept",
    "cleanFileForciblyEnable": "delete the oldest files when the disk is over its ratio",
    "diskSpaceWarningLevelRatio": "share of the disk above which puts are refused",
    "diskSpaceCleanForciblyRatio": "share of the disk above which files are cleaned at once",
    "haListenPort": "the port slaves replicate from",
    "haMasterAddress": "a slave's master HA address (empty: the name server names it)",
    "haSendHeartbeatInterval": "ms between a slave's reports to its master",
    "haHousekeepingInterval": "ms of silence after which an HA connection is closed",
    "haTransferBatchSize": "bytes the master sends a slave at a time",
    "haSlaveFallbehindMax": "bytes a slave may be behind and still count for SYNC_MASTER",
    "haEnable": "an ASYNC_MASTER listens for slaves",
    "haListenHost": "the address the HA port binds (127.0.0.1)",
    "haReconnectInterval": "ms between a slave's tries to reach its master",
    "enableControllerMode": "take the role from RocketMQ 5's controllers",
    "allAckInSyncStateSet": "a SYNC send waits for every member of the SyncStateSet",
    "inSyncReplicas": "replicas a send waits for without allAckInSyncStateSet",
    "minInSyncReplicas": "refuse writes while the SyncStateSet is smaller",
    "haMaxTimeSlaveNotCatchup": "ms a slave may lag before it leaves the SyncStateSet",
    "storePathEpochFile": "the epoch file (empty: `<root>/epochFileCheckpoint`)",
    "syncFromLastFile": "a new slave starts at its master's last file",
    "osPageCacheBusyTimeOutMills": "ms a put may hold the put lock before the broker counts "
    "as busy",
    "tieredDir": "where sealed commit-log files are kept as Parquet (empty: no tier)",
    "tieredSealAgeMs": "ms of idleness after which the last file counts as sealed",
    "tieredRetentionHours": "hours the tier keeps a file (0: no limit)",
    "tieredMaxBytes": "bytes the tier keeps at most (0: no limit)",
    # -- the broker
    "brokerName": "the broker group's name",
    "brokerClusterName": "the cluster the broker registers in",
    "brokerId": "0 for a master, 1 and up for a slave",
    "namesrvAddr": "the name servers, `host:port;host:port` (else NAMESRV_ADDR)",
    "autoCreateTopicEnable": "a send to an unknown topic creates it",
    "autoCreateSubscriptionGroup": "a pull of an unknown group creates it",
    "traceTopicEnable": "create the message-trace topic at start",
    "msgTraceTopicName": "the message-trace topic",
    "defaultTopicQueueNums": "queues of a topic a send creates",
    "brokerPermission": "6 read and write, 4 read only, 2 write only",
    "longPollingEnable": "hold pulls that find nothing until a message comes",
    "shortPollingTimeMills": "ms a pull is held without long polling",
    "flushConsumerOffsetInterval": "ms between two writes of consumerOffset.json",
    "registerNameServerPeriod": "ms between two registrations with the name servers",
    "forceRegister": "send the whole topic table every period even to a name server whose version is current (RocketMQ's default: true)",
    "slaveReadEnable": "pulls may be sent to a slave",
    "serverMaxFrameSize": "the largest frame the remoting port reads",
    "maxReconsumeTimes": "retries of a message before it goes to the DLQ",
    "rejectTransactionMessage": "refuse half messages",
    "transactionTimeOut": "ms before a half message is checked",
    "transactionCheckMax": "checks of a half message before it is given up",
    "transactionCheckInterval": "ms between two rounds of transaction checks",
    "aclEnable": "check every request against plain_acl.yml",
    "serverMaxConnections": "connections the remoting port accepts",
    "serverMaxBufferedBytes": "bytes of unsent answers all connections may hold",
    "controllerAddr": "the controllers, `host:port;host:port`",
    "brokerHeartbeatInterval": "ms between heartbeats to the controllers",
    "controllerHeartBeatTimeoutMills": "ms without a heartbeat after which the controllers "
    "count the broker dead",
    "syncBrokerMetadataPeriod": "ms between a slave's questions for its role",
    "checkSyncStateSetPeriod": "ms between a master's checks of its SyncStateSet",
    "syncControllerMetadataPeriod": "ms between asking which controller leads",
    "brokerElectionPriority": "lower is preferred when an election ties",
    "controllerLeaseMills": "ms a master acknowledges writes after the controller last "
    "confirmed it (0: 80 % of the heartbeat timeout)",
    "innerClientAuthenticationCredentials": "the account a server's own clients sign with (a "
    "broker's registrations and controller requests, a controller's notices), "
    '`{"accessKey": ..., "secretKey": ...}`',
    "haAuthEnabled": "slaves prove the inner account on the HA port (unset: on with ACL; "
    "false for a group with RocketMQ brokers, which cannot)",
    "haTlsMode": "TLS on the HA port: disabled, permissive (TLS and plain slaves) or enforcing, "
    "with the remoting port's certificate, key and trust; a slave speaks TLS to its master "
    "unless disabled (disabled for a group with RocketMQ brokers, which speak plain HA)",
    # -- ACL 2.0 (RocketMQ 5.3)
    "authenticationEnabled": "requests must be signed by an ACL 2.0 user (config/auth.json)",
    "authorizationEnabled": "requests are decided by the user's ACL 2.0 policies",
    "authenticationProvider": "RocketMQ's provider class; only its default is accepted",
    "authorizationProvider": "RocketMQ's provider class; only its default is accepted",
    "authenticationMetadataProvider": "RocketMQ's metadata class; only its default is accepted",
    "authorizationMetadataProvider": "RocketMQ's metadata class; only its default is accepted",
    "authenticationStrategy": "RocketMQ's strategy class; only its default is accepted",
    "authorizationStrategy": "RocketMQ's strategy class; only its default is accepted",
    "authenticationWhitelist": "request codes let in without authentication (`10,310`)",
    "authorizationWhitelist": "request codes let in without authorisation",
    "initAuthenticationUser": 'a Super user made at start, `{"username": ..., "password": ...}`',
    "migrateAuthFromV1Enabled": "at start, plain_acl.yml's accounts become users with ACLs",
    # -- the controller
    "controllerDLegerGroup": "the controllers' group name",
    "controllerDLegerSelfId": "this controller's id",
    "controllerStorePath": "where the file backend keeps the controller's state",
    "controllerBackend": "`file` (one controller) or `etcd` (several)",
    "controllerEtcdEndpoints": "etcd's client URLs, comma-separated",
    "controllerEtcdPrefix": "the prefix of the controller's etcd keys",
    "controllerEtcdUser": "etcd user the controller signs in as (etcd's auth; its token on "
    "every call)",
    "controllerEtcdPassword": "that user's password (else ROCKETSTORE_ETCD_PASSWORD)",
    "controllerEtcdCaFile": "CA certificates (PEM) for https:// etcd endpoints",
    "controllerEtcdCertFile": "client certificate (PEM) presented to etcd",
    "controllerEtcdKeyFile": "the client certificate's private key (PEM)",
    "controllerEtcdInsecure": "let an etcd backend without credentials run while ACL is on",
    "controllerLeaseTtl": "seconds of the etcd lease a leading controller holds",
    "enableElectUncleanMaster": "elect a replica outside the SyncStateSet when none in it "
    "is alive (may lose messages)",
    "notifyBrokerRoleChanged": "tell the brokers of a new master at once",
    "scanNotActiveBrokerInterval": "ms between two scans for brokers without heartbeats",
    "scanInactiveMasterInterval": "ms between two scans for groups without a live master",
    "brokerHeartbeatTimeoutMills": "ms without a heartbeat after which a broker is dead",
    "controllerListen": "the controller's address (else the listen port of the namesrv.conf)",
    "controllerDLegerPeers": "the controllers, `n0-host:port;n1-host:port`",
    # -- the name server
    "enableControllerInNamesrv": "run a controller inside the name server",
    "kvConfigPath": "the KV config's file",
}

ROCKETMQ_5_KEYS = frozenset(
    {
        "enableControllerMode",
        "allAckInSyncStateSet",
        "inSyncReplicas",
        "minInSyncReplicas",
        "haMaxTimeSlaveNotCatchup",
        "storePathEpochFile",
        "syncFromLastFile",
        "controllerAddr",
        "brokerHeartbeatInterval",
        "controllerHeartBeatTimeoutMills",
        "syncBrokerMetadataPeriod",
        "checkSyncStateSetPeriod",
        "syncControllerMetadataPeriod",
        "brokerElectionPriority",
        "innerClientAuthenticationCredentials",
        "authenticationEnabled",
        "authorizationEnabled",
        "authenticationProvider",
        "authorizationProvider",
        "authenticationMetadataProvider",
        "authorizationMetadataProvider",
        "authenticationStrategy",
        "authorizationStrategy",
        "authenticationWhitelist",
        "authorizationWhitelist",
        "initAuthenticationUser",
        "migrateAuthFromV1Enabled",
        "controllerDLegerGroup",
        "controllerDLegerSelfId",
        "controllerStorePath",
        "enableElectUncleanMaster",
        "notifyBrokerRoleChanged",
        "scanNotActiveBrokerInterval",
        "scanInactiveMasterInterval",
        "brokerHeartbeatTimeoutMills",
        "controllerListen",
        "controllerDLegerPeers",
        "enableControllerInNamesrv",
    }
)
"""Keys RocketMQ 5 reads that 4.9.8 did not (the rest not in 4.9.8's list are rocketstore's)."""

NAMESRV_KEYS: tuple[tuple[str, str], ...] = (
    ("listenPort", "9876"),
    ("kvConfigPath", "~/namesrv/kvConfig.json"),
    ("enableControllerInNamesrv", "false"),
)


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    default: str
    origin: str  # "RocketMQ 4.9.8", "RocketMQ 5", "rocketstore"
    acted_on: bool


def _camel(field_name: str) -> str:
    head, *rest = field_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _origin(name: str) -> str:
    return "RocketMQ 5" if name in ROCKETMQ_5_KEYS else "rocketstore"


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "(unset)"
    return str(value)


def broker_keys() -> list[Key]:
    """broker.conf: the store's and the broker's settings, then RocketMQ's keys ignored."""
    from ..broker._config import _CONF_KEYS, BrokerConfig
    from ..broker.admin._config_keys import ROCKETMQ_CONFIG_OBJECTS
    from ..store._config import _CONF_ALIASES, StoreConfig

    rocketmq = {k: v for obj in ROCKETMQ_CONFIG_OBJECTS for k, v in obj}
    by_lower = {k.lower(): k for k in rocketmq}
    alias_of = {field: key for key, field in _CONF_ALIASES.items()}
    store_defaults, broker_defaults = StoreConfig(), BrokerConfig()
    keys: dict[str, Key] = {}

    def origin(name: str) -> str:
        return "RocketMQ 4.9.8" if name in rocketmq else _origin(name)

    for f in dataclasses.fields(StoreConfig):
        if f.name == "extra":
            continue
        name = alias_of.get(f.name) or _camel(f.name)
        name = by_lower.get(name.lower(), name)  # RocketMQ's spelling: checkCRCOnRecover
        default = _text(getattr(store_defaults, f.name))
        if f.name == "store_path_root_dir":
            default = "~/store"
        keys[name] = Key(name, default, origin(name), True)
    for name, attr in _CONF_KEYS.items():
        if name in keys:
            continue
        default = _text(getattr(broker_defaults, attr))
        keys[name] = Key(name, default, origin(name), True)
    for name, value in rocketmq.items():
        if name in keys:
            continue
        text = "(the machine's)" if callable(value) else "" if value is None else str(value)
        keys[name] = Key(name, text, "RocketMQ 4.9.8", False)
    return sorted(keys.values(), key=lambda k: (not k.acted_on, k.name.lower()))


def controller_keys() -> list[Key]:
    from ..controller._config import _KEY_OF, ControllerConfig

    defaults = ControllerConfig()
    out = []
    for attr, name in _KEY_OF.items():
        value = getattr(defaults, attr)
        text = ",".join(value) if isinstance(value, tuple) else _text(value)
        if attr == "store_path":
            text = "~/DledgerController"
        out.append(Key(name, text, _origin(name), True))
    out.append(Key("controllerListen", "127.0.0.1:9878", "RocketMQ 5", True))
    out.append(Key("controllerDLegerPeers", "", "RocketMQ 5", True))
    return sorted(out, key=lambda k: k.name.lower())


def _rows(keys: list[Key]) -> Iterator[str]:
    yield "| key | default | from | rocketstore | what it does |"
    yield "|---|---|---|---|---|"
    for k in keys:
        default = (
            "(empty)" if k.default == "" else k.default if k.default[0] == "(" else f"`{k.default}`"
        )
        act = "acted on" if k.acted_on else "ignored (named in a warning at start)"
        what = WHAT.get(k.name, "") if k.acted_on else ""
        yield f"| `{k.name}` | {default.replace('|', '&#124;')} | {k.origin} | {act} | {what} |"


def reference() -> str:
    """docs/configuration.md's text."""
    lines = [
        "# Configuration keys",
        "",
        "Every key of the three configuration files, generated from their tables by",
        "`rocketstore config-keys` (a test keeps this page equal to its output). A key that",
        "rocketstore does not act on is accepted and named in one warning when the server",
        "starts; a key nobody knows is named with the closest known one. Values are read as",
        "Java's `Properties` reads them: `key=value`, comments on their own lines only.",
        "",
        "## broker.conf (`rocketstore broker -c`, `rocketstore serve -c`)",
        "",
        *_rows(broker_keys()),
        "",
        "## controller.conf (`rocketstore controller -c`) and a namesrv.conf's controller keys",
        "",
        *_rows(controller_keys()),
        "",
        "## namesrv.conf (`rocketstore namesrv -c`)",
        "",
        *_rows([Key(n, d, "RocketMQ 4.9.8", True) for n, d in NAMESRV_KEYS]),
        "",
    ]
    return "\n".join(lines)


@click.command("config-keys")
def config_keys() -> None:
    """Every key of broker.conf, controller.conf and namesrv.conf as a Markdown reference:
    its default, whether rocketstore acts on it, what it does (docs/configuration.md)."""
    click.echo(reference(), nl=False)


COMMANDS = [config_keys]

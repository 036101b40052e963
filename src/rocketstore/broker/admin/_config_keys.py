"""GET_BROKER_CONFIG's text as RocketMQ 4.9.8's broker prints it (Configuration's
``getAllConfigsFormatString``): every field of its BrokerConfig, NettyServerConfig,
NettyClientConfig and MessageStoreConfig by RocketMQ's name ("Maped" spellings included), then
the keys of broker.conf those do not have, one ``key=value`` line each, in the order Java 8's
``Properties`` (a ``Hashtable``) iterates them.

Values: rocketstore's setting where it has one (``brokerIP1`` and ``brokerIP2`` the address
clients reach); else RocketMQ's default, those that depend on the machine (thread pools by
processor count, the host name, ``~/store``) computed here as RocketMQ computes them. A field
RocketMQ leaves null (``rocketmqHome`` without ROCKETMQ_HOME, ``haMasterAddress``, the DLedger
settings, ...) is not printed, as RocketMQ prints no null; rocketstore's empty texts in those
fields are left out too. rocketstore's own settings (``listenHost``, ``serverMaxConnections``,
``dispatchInPutPath``, ...) follow as the extra keys of a broker.conf do.

The order: RocketMQ fills one Properties per config object in field order, merges each into the
broker's table in that Properties' order, then the conf file's; the text lists the table in its
iteration order. :class:`JavaHashtable` replays those insertions (initial capacity 11, load
factor 0.75, rehash to ``2n+1``, a new entry first in its bucket, iteration from the last bucket
down), so the lines come out in RocketMQ's order.

Pure functions; any thread.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping

from ...store._java_hash import java_hash_unsigned

Default = str | Callable[[], str | None] | None


def _cpus() -> str:
    return str(os.cpu_count() or 1)


def _send_threads() -> str:
    return str(min(os.cpu_count() or 1, 4))


def _pull_threads() -> str:
    return str(16 + (os.cpu_count() or 1) * 2)


def _query_threads() -> str:
    return str(8 + (os.cpu_count() or 1))


def _heartbeat_threads() -> str:
    return str(min(32, os.cpu_count() or 1))


def _end_transaction_threads() -> str:
    cpu = os.cpu_count() or 1
    return str(max(8 + cpu * 2, min(cpu, 4) * 4))


def _host_name() -> str:
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


def _home_store() -> str:
    return os.path.join(os.path.expanduser("~"), "store")


def _home() -> str | None:
    return os.environ.get("ROCKETMQ_HOME")


def _namesrv_env() -> str | None:
    return os.environ.get("NAMESRV_ADDR")


# RocketMQ 4.9.8's BrokerConfig fields in declaration order, with their defaults
BROKER_CONFIG_KEYS: tuple[tuple[str, Default], ...] = (
    ("rocketmqHome", _home),
    ("namesrvAddr", _namesrv_env),
    ("brokerIP1", None),
    ("brokerIP2", None),
    ("brokerName", _host_name),
    ("brokerClusterName", "DefaultCluster"),
    ("brokerId", "0"),
    ("brokerPermission", "6"),
    ("defaultTopicQueueNums", "8"),
    ("autoCreateTopicEnable", "true"),
    ("clusterTopicEnable", "true"),
    ("brokerTopicEnable", "true"),
    ("autoCreateSubscriptionGroup", "true"),
    ("messageStorePlugIn", ""),
    ("msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC"),
    ("traceTopicEnable", "false"),
    ("sendMessageThreadPoolNums", _send_threads),
    ("putMessageFutureThreadPoolNums", _send_threads),
    ("pullMessageThreadPoolNums", _pull_threads),
    ("processReplyMessageThreadPoolNums", _pull_threads),
    ("queryMessageThreadPoolNums", _query_threads),
    ("adminBrokerThreadPoolNums", "16"),
    ("clientManageThreadPoolNums", "32"),
    ("consumerManageThreadPoolNums", "32"),
    ("heartbeatThreadPoolNums", _heartbeat_threads),
    ("endTransactionThreadPoolNums", _end_transaction_threads),
    ("flushConsumerOffsetInterval", "5000"),
    ("flushConsumerOffsetHistoryInterval", "60000"),
    ("rejectTransactionMessage", "false"),
    ("fetchNamesrvAddrByAddressServer", "false"),
    ("sendThreadPoolQueueCapacity", "10000"),
    ("putThreadPoolQueueCapacity", "10000"),
    ("pullThreadPoolQueueCapacity", "100000"),
    ("replyThreadPoolQueueCapacity", "10000"),
    ("queryThreadPoolQueueCapacity", "20000"),
    ("clientManagerThreadPoolQueueCapacity", "1000000"),
    ("consumerManagerThreadPoolQueueCapacity", "1000000"),
    ("heartbeatThreadPoolQueueCapacity", "50000"),
    ("endTransactionPoolQueueCapacity", "100000"),
    ("filterServerNums", "0"),
    ("longPollingEnable", "true"),
    ("shortPollingTimeMills", "1000"),
    ("notifyConsumerIdsChangedEnable", "true"),
    ("highSpeedMode", "false"),
    ("commercialEnable", "true"),
    ("commercialTimerCount", "1"),
    ("commercialTransCount", "1"),
    ("commercialBigCount", "1"),
    ("commercialBaseCount", "1"),
    ("transferMsgByHeap", "true"),
    ("maxDelayTime", "40"),
    ("regionId", "DefaultRegion"),
    ("registerBrokerTimeoutMills", "6000"),
    ("slaveReadEnable", "false"),
    ("disableConsumeIfConsumerReadSlowly", "false"),
    ("consumerFallbehindThreshold", "17179869184"),
    ("brokerFastFailureEnable", "true"),
    ("waitTimeMillsInSendQueue", "200"),
    ("waitTimeMillsInPullQueue", "5000"),
    ("waitTimeMillsInHeartbeatQueue", "31000"),
    ("waitTimeMillsInTransactionQueue", "3000"),
    ("startAcceptSendRequestTimeStamp", "0"),
    ("traceOn", "true"),
    ("enableCalcFilterBitMap", "false"),
    ("expectConsumerNumUseFilter", "32"),
    ("maxErrorRateOfBloomFilter", "20"),
    ("filterDataCleanTimeSpan", "86400000"),
    ("filterSupportRetry", "false"),
    ("enablePropertyFilter", "false"),
    ("compressedRegister", "false"),
    ("forceRegister", "true"),
    ("registerNameServerPeriod", "30000"),
    ("transactionTimeOut", "6000"),
    ("transactionCheckMax", "15"),
    ("transactionCheckInterval", "60000"),
    ("aclEnable", "false"),
    ("storeReplyMessageEnable", "true"),
    ("enableDetailStat", "true"),
    ("autoDeleteUnusedStats", "false"),
    ("isolateLogEnable", "false"),
    ("configBlackList", "configBlackList;brokerConfigPath"),
)

# NettyServerConfig (the broker sets listenPort 10911)
NETTY_SERVER_CONFIG_KEYS: tuple[tuple[str, Default], ...] = (
    ("listenPort", "10911"),
    ("serverWorkerThreads", "8"),
    ("serverCallbackExecutorThreads", "0"),
    ("serverSelectorThreads", "3"),
    ("serverOnewaySemaphoreValue", "256"),
    ("serverAsyncSemaphoreValue", "64"),
    ("serverChannelMaxIdleTimeSeconds", "120"),
    ("serverSocketSndBufSize", "0"),
    ("serverSocketRcvBufSize", "0"),
    ("writeBufferHighWaterMark", "0"),
    ("writeBufferLowWaterMark", "0"),
    ("serverSocketBacklog", "1024"),
    ("serverPooledByteBufAllocatorEnable", "true"),
    ("useEpollNativeSelector", "false"),
)

# NettyClientConfig
NETTY_CLIENT_CONFIG_KEYS: tuple[tuple[str, Default], ...] = (
    ("clientWorkerThreads", "4"),
    ("clientCallbackExecutorThreads", _cpus),
    ("clientOnewaySemaphoreValue", "65535"),
    ("clientAsyncSemaphoreValue", "65535"),
    ("connectTimeoutMillis", "3000"),
    ("channelNotActiveInterval", "60000"),
    ("clientChannelMaxIdleTimeSeconds", "120"),
    ("clientSocketSndBufSize", "0"),
    ("clientSocketRcvBufSize", "0"),
    ("clientPooledByteBufAllocatorEnable", "false"),
    ("clientCloseSocketIfTimeout", "true"),
    ("useTLS", "false"),
    ("writeBufferHighWaterMark", "0"),
    ("writeBufferLowWaterMark", "0"),
)

# MessageStoreConfig
MESSAGE_STORE_CONFIG_KEYS: tuple[tuple[str, Default], ...] = (
    ("storePathRootDir", _home_store),
    ("storePathCommitLog", None),
    ("storePathDLedgerCommitLog", None),
    ("readOnlyCommitLogStorePaths", None),
    ("mappedFileSizeCommitLog", "1073741824"),
    ("mappedFileSizeConsumeQueue", "6000000"),
    ("enableConsumeQueueExt", "false"),
    ("mappedFileSizeConsumeQueueExt", "50331648"),
    ("bitMapLengthConsumeQueueExt", "64"),
    ("flushIntervalCommitLog", "500"),
    ("commitIntervalCommitLog", "200"),
    ("useReentrantLockWhenPutMessage", "true"),
    ("flushCommitLogTimed", "true"),
    ("flushIntervalConsumeQueue", "1000"),
    ("cleanResourceInterval", "10000"),
    ("deleteCommitLogFilesInterval", "100"),
    ("deleteConsumeQueueFilesInterval", "100"),
    ("destroyMapedFileIntervalForcibly", "120000"),
    ("redeleteHangedFileInterval", "120000"),
    ("deleteWhen", "04"),
    ("diskMaxUsedSpaceRatio", "75"),
    ("fileReservedTime", "72"),
    ("putMsgIndexHightWater", "600000"),
    ("maxMessageSize", "4194304"),
    ("checkCRCOnRecover", "true"),
    ("flushCommitLogLeastPages", "4"),
    ("commitCommitLogLeastPages", "4"),
    ("flushLeastPagesWhenWarmMapedFile", "4096"),
    ("flushConsumeQueueLeastPages", "2"),
    ("flushCommitLogThoroughInterval", "10000"),
    ("commitCommitLogThoroughInterval", "200"),
    ("flushConsumeQueueThoroughInterval", "60000"),
    ("maxTransferBytesOnMessageInMemory", "262144"),
    ("maxTransferCountOnMessageInMemory", "32"),
    ("maxTransferBytesOnMessageInDisk", "65536"),
    ("maxTransferCountOnMessageInDisk", "8"),
    ("accessMessageInMemoryMaxRatio", "40"),
    ("messageIndexEnable", "true"),
    ("maxHashSlotNum", "5000000"),
    ("maxIndexNum", "20000000"),
    ("maxMsgsNumBatch", "64"),
    ("messageIndexSafe", "false"),
    ("haListenPort", "10912"),
    ("haSendHeartbeatInterval", "5000"),
    ("haHousekeepingInterval", "20000"),
    ("haTransferBatchSize", "32768"),
    ("haMasterAddress", None),
    ("haSlaveFallbehindMax", "268435456"),
    ("brokerRole", "ASYNC_MASTER"),
    ("flushDiskType", "ASYNC_FLUSH"),
    ("syncFlushTimeout", "5000"),
    ("slaveTimeout", "3000"),
    ("messageDelayLevel", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"),
    ("flushDelayOffsetInterval", "10000"),
    ("cleanFileForciblyEnable", "true"),
    ("warmMapedFileEnable", "false"),
    ("offsetCheckInSlave", "false"),
    ("debugLockEnable", "false"),
    ("duplicationEnable", "false"),
    ("diskFallRecorded", "true"),
    ("osPageCacheBusyTimeOutMills", "1000"),
    ("defaultQueryMaxNum", "32"),
    ("transientStorePoolEnable", "false"),
    ("transientStorePoolSize", "5"),
    ("fastFailIfNoBufferInStorePool", "false"),
    ("enableDLegerCommitLog", "false"),
    ("dLegerGroup", None),
    ("dLegerPeers", None),
    ("dLegerSelfId", None),
    ("preferredLeaderId", None),
    ("isEnableBatchPush", "false"),
    ("enableScheduleMessageStats", "true"),
    ("enableLmq", "false"),
    ("enableMultiDispatch", "false"),
    ("maxLmqConsumeQueueNum", "20000"),
    ("enableScheduleAsyncDeliver", "false"),
    ("scheduleAsyncDeliverMaxPendingLimit", "2000"),
    ("scheduleAsyncDeliverMaxResendNum2Blocked", "3"),
)

ROCKETMQ_CONFIG_OBJECTS = (
    BROKER_CONFIG_KEYS,
    NETTY_SERVER_CONFIG_KEYS,
    NETTY_CLIENT_CONFIG_KEYS,
    MESSAGE_STORE_CONFIG_KEYS,
)
ROCKETMQ_KEYS = frozenset(k for obj in ROCKETMQ_CONFIG_OBJECTS for k, _ in obj)


class JavaHashtable:
    """The iteration order of Java 8's ``Hashtable<String, String>`` (so of ``Properties``)
    after the same puts: buckets by ``(hashCode & 0x7FFFFFFF) % capacity``, a new key put first
    in its bucket, a rehash to ``2 * capacity + 1`` when the count reaches 0.75 of the
    capacity (walking the old buckets from the last, each key again first in its new bucket),
    iteration from the last bucket to the first."""

    def __init__(self, capacity: int = 11) -> None:
        self._buckets: list[list[str]] = [[] for _ in range(capacity)]
        self._threshold = int(capacity * 0.75)
        self._values: dict[str, str] = {}

    @staticmethod
    def _index(key: str, capacity: int) -> int:
        return (java_hash_unsigned(key) & 0x7FFFFFFF) % capacity

    def put(self, key: str, value: str) -> None:
        if key in self._values:
            self._values[key] = value
            return
        if len(self._values) >= self._threshold:
            self._rehash()
        self._buckets[self._index(key, len(self._buckets))].insert(0, key)
        self._values[key] = value

    def _rehash(self) -> None:
        old = self._buckets
        capacity = len(old) * 2 + 1
        self._threshold = int(capacity * 0.75)
        self._buckets = [[] for _ in range(capacity)]
        for bucket in reversed(old):
            for key in bucket:
                self._buckets[self._index(key, capacity)].insert(0, key)

    def __iter__(self) -> Iterator[str]:
        for bucket in reversed(self._buckets):
            yield from bucket

    def items(self) -> list[tuple[str, str]]:
        return [(k, self._values[k]) for k in self]

    def merge_from(self, pairs: Iterable[tuple[str, str]]) -> None:
        """RocketMQ's Configuration.merge: ``pairs`` put into a Properties of their own in
        their order, then that one's entries put here in its iteration order."""
        own = JavaHashtable()
        for key, value in pairs:
            own.put(key, value)
        for key, value in own.items():
            self.put(key, value)


def _default(value: Default) -> str | None:
    return value() if callable(value) else value


def rocketmq_config_lines(
    values: Mapping[str, str], extra: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The (key, value) pairs of GET_BROKER_CONFIG in RocketMQ's order: each RocketMQ field with
    ``values``' text for it (a key absent there: RocketMQ's default; an empty text where
    RocketMQ's default is null: left out), then ``extra`` keys (rocketstore's own settings,
    broker.conf's other keys), taken from ``values``, as a conf file's keys are merged."""
    table = JavaHashtable()
    for obj in ROCKETMQ_CONFIG_OBJECTS:
        pairs: list[tuple[str, str]] = []
        for key, default in obj:
            text = values.get(key)
            if text is None or (text == "" and default is None):
                text = _default(default)
            if text is not None:
                pairs.append((key, text))
        table.merge_from(pairs)
    table.merge_from((k, values[k]) for k in extra if k in values and k not in ROCKETMQ_KEYS)
    return table.items()

"""Message trace written by RocketMQ 4.9.8's own Java client (a producer and a push consumer with
message trace on) to a rocketstore broker, read back by the console: the broker takes the trace
client's sends to RMQ_SYS_TRACE_TOPIC (creating the topic on the first one, as RocketMQ's
broker does with autoCreateTopicEnable) and the console decodes the Pub, SubBefore and SubAfter
records. Needs ROCKETMQ_CLASSPATH and java (tests/support/rocketmq_java.py); skipped without them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rocketstore.client._trace import TRACE_TOPIC
from support.console_env import ConsoleEnv, http
from support.rocketmq_java import java_command, java_env, unavailable
from support.waits import wait_until

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

TOPIC = "JavaTracedTopic"

TRACED = """\
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

public class Traced {
    public static void main(String[] a) throws Exception {
        String namesrv = a[0], topic = a[1];
        DefaultMQProducer producer = new DefaultMQProducer("JavaTracedProducers", true);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("traced-producer");
        producer.start();
        SendResult sent = producer.send(new Message(topic, "TagJ", "java-trace-key", "traced".getBytes("UTF-8")));
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("JavaTracedConsumers", true);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("traced-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        CountDownLatch got = new CountDownLatch(1);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            got.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean consumed = got.await(40, TimeUnit.SECONDS);
        Thread.sleep(500);
        // shutting down flushes each trace dispatcher's pending records
        consumer.shutdown();
        producer.shutdown();
        System.out.println("SENT " + sent.getMsgId() + " " + sent.getSendStatus() + " " + consumed);
    }
}
"""


def test_the_console_reads_the_java_clients_traces(tmp_path: Path) -> None:
    env = ConsoleEnv(tmp_path / "cluster")
    try:
        env.open()
        assert env.admin is not None
        env.admin.create_topic(env.broker_addr, TOPIC, read_queue_nums=1, write_queue_nums=1)
        assert wait_until(lambda: env.ns is not None and env.ns.routes.route(TOPIC) is not None)
        source = tmp_path / "Traced.java"
        source.write_text(TRACED)
        done = subprocess.run(
            java_command(tmp_path, str(source), env.namesrv, TOPIC),
            env=java_env(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=150,
        )
        [line] = [x for x in done.stdout.splitlines() if x.startswith("SENT ")] or [
            done.stderr[-3000:]
        ]
        _, msg_id, status, consumed = line.split()
        assert (status, consumed) == ("SEND_OK", "true"), done.stderr[-3000:]
        assert env.broker is not None
        assert env.broker.topics.select(TRACE_TOPIC) is not None  # made by the first trace

        def rows() -> list[dict[str, object]]:
            return list(http(env, "GET", f"/api/trace?id={msg_id}").doc["rows"])

        assert wait_until(
            lambda: {r["type"] for r in rows()} >= {"Pub", "SubBefore", "SubAfter"}, 20
        )
        by_type = {str(r["type"]): r for r in rows()}
        pub = by_type["Pub"]
        assert (pub["group"], pub["topic"], pub["tags"], pub["status"]) == (
            "JavaTracedProducers",
            TOPIC,
            "TagJ",
            "success",
        )
        assert pub["keys"] == "java-trace-key" and pub["msgType"] == "Normal_Msg"
        assert pub["clientHost"] == "127.0.0.1"
        assert by_type["SubBefore"]["group"] == "JavaTracedConsumers"
        assert by_type["SubAfter"]["status"] == "success"
        doc = http(env, "GET", f"/api/trace?id={msg_id}").doc
        [consumer] = doc["consumers"]
        assert consumer["group"] == "JavaTracedConsumers"
        assert consumer["attempts"][0]["status"] == "success"
        assert doc["unreadable"] == 0
    finally:
        env.close()

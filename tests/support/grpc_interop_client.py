"""Scenarios run by the official RocketMQ 5.x Python client (rocketmq-python-client), in its own
venv, against rocketstore's gRPC front end. Not a test module: tests/test_grpc_interop.py runs
``python grpc_interop_client.py '<json>'`` with the venv's python and reads one JSON object
from the last line of standard output.

The argument names the scenario and its parameters; see each ``scenario_*`` function. It must
not import rocketstore (the client's generated protocol modules clash with ours).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


def _config(args: dict[str, Any]) -> ClientConfiguration:
    creds = Credentials(args.get("ak", ""), args.get("sk", ""))
    return ClientConfiguration(args["endpoints"], creds, request_timeout=args.get("timeout", 3))


def _message_out(m: Any) -> dict[str, Any]:
    return {
        "body": m.body.decode(),
        "tag": m.tag,
        "keys": sorted(m.keys),
        "properties": dict(m.properties),
        "message_id": m.message_id,
        "attempt": m.delivery_attempt,
        "corrupted": m.corrupted,
        "topic": m.topic,
        "delivery_timestamp": m.delivery_timestamp,
        "born_timestamp": m.born_timestamp,
    }


def scenario_produce(args: dict[str, Any]) -> dict[str, Any]:
    """Send ``messages`` ({body, tag?, keys?, properties?, delay_s?}) to ``topic``."""
    producer = Producer(_config(args), (args["topic"],), tls_enable=args.get("tls", False))
    producer.startup()
    receipts = []
    errors = []
    try:
        for spec in args["messages"]:
            msg = Message()
            msg.topic = args["topic"]
            msg.body = spec["body"].encode()
            if spec.get("tag"):
                msg.tag = spec["tag"]
            if spec.get("keys"):
                msg.keys = spec["keys"][0]
                for key in spec["keys"][1:]:
                    msg.keys = key
            for k, v in (spec.get("properties") or {}).items():
                msg.add_property(k, v)
            if spec.get("delay_s"):
                msg.delivery_timestamp = int(time.time()) + int(spec["delay_s"])
            try:
                r = producer.send(msg)
                receipts.append({"message_id": r.message_id, "offset": r.offset})
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        producer.shutdown()
    return {"receipts": receipts, "errors": errors}


def _simple(args: dict[str, Any], await_s: int) -> SimpleConsumer:
    consumer = SimpleConsumer(
        _config(args),
        args["group"],
        {args["topic"]: FilterExpression(args.get("filter", "*"))},
        await_duration=await_s,
    )
    consumer.startup()
    return consumer


def _receive_until(
    consumer: SimpleConsumer, count: int, invisible_s: int, limit_s: float
) -> list[Any]:
    got: list[Any] = []
    end = time.monotonic() + limit_s
    while len(got) < count and time.monotonic() < end:
        got.extend(consumer.receive(32, invisible_s))
    return got


def scenario_simple(args: dict[str, Any]) -> dict[str, Any]:
    """SimpleConsumer on ``topic`` with ``filter``, expecting ``expect`` messages:

    1. receive them (invisible 2 s); ack the first; move the second's invisible time to 1 s
       and then ack it with its old handle (refused); leave the rest;
    2. receive until the second and the rest come back (attempt 2), ack them;
    3. one more receive with nothing left: how long the empty long poll took.
    """
    consumer = _simple(args, args.get("await_s", 2))
    out: dict[str, Any] = {}
    try:
        first = _receive_until(consumer, args["expect"], 2, 15)
        out["first"] = [_message_out(m) for m in first]
        consumer.ack(first[0])
        second = first[1]
        old_handle = second.receipt_handle
        consumer.change_invisible_duration(second, 1)
        out["handle_changed"] = second.receipt_handle != old_handle
        stale = Message()
        stale.topic = args["topic"]
        stale.message_id = second.message_id
        stale.receipt_handle = old_handle
        stale.endpoints = second.endpoints
        try:
            consumer.ack(stale)
            out["stale_ack"] = "accepted"
        except Exception as exc:
            out["stale_ack"] = f"{type(exc).__name__}: {getattr(exc, 'code', '')}"
        again = _receive_until(consumer, args["expect"] - 1, 2, 15)
        out["again"] = [_message_out(m) for m in again]
        for m in again:
            consumer.ack(m)
        begin = time.monotonic()
        empty = consumer.receive(32, 2)
        out["empty"] = len(empty)
        out["empty_s"] = time.monotonic() - begin
    finally:
        consumer.shutdown()
    return out


def scenario_receive(args: dict[str, Any]) -> dict[str, Any]:
    """Receive ``rounds`` times (invisible ``invisible_s``, never acking), pausing ``pause_s``
    between rounds; the attempts seen."""
    consumer = _simple(args, args.get("await_s", 1))
    rounds = []
    try:
        for _ in range(args["rounds"]):
            got = consumer.receive(32, args["invisible_s"])
            rounds.append([_message_out(m) for m in got])
            time.sleep(args.get("pause_s", 0))
    finally:
        consumer.shutdown()
    return {"rounds": rounds}


def scenario_push(args: dict[str, Any]) -> dict[str, Any]:
    """PushConsumer: consume until ``expect`` messages arrived (the ones with body ``fail``
    fail once, so they come back) or ``limit_s`` passed."""
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()

    class Listener(MessageListener):
        def consume(self, message: Any) -> ConsumeResult:
            with lock:
                seen.append(_message_out(message))
            if message.body == b"fail" and message.delivery_attempt == 1:
                return ConsumeResult.FAILURE
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        _config(args),
        args["group"],
        Listener(),
        {args["topic"]: FilterExpression(args.get("filter", "*"))},
    )
    consumer.startup()
    try:
        end = time.monotonic() + args.get("limit_s", 20)
        while time.monotonic() < end:
            with lock:
                bodies = [s["body"] for s in seen]
                retried = [s for s in seen if s["body"] == "fail" and (s["attempt"] or 0) > 1]
            if len(set(bodies)) >= args["expect"] and (
                "fail" not in bodies or retried or not args.get("wait_retry")
            ):
                break
            time.sleep(0.1)
        time.sleep(args.get("settle_s", 0.5))
    finally:
        consumer.shutdown()
    return {"seen": seen}


def scenario_latency(args: dict[str, Any]) -> dict[str, Any]:
    """A consumer waits in a long poll while a producer sends ``count`` messages one at a time,
    each after the previous one was received: receive latency (send start → receive) in ms."""
    consumer = _simple(args, args.get("await_s", 5))
    producer = Producer(_config(args), (args["topic"],))
    producer.startup()
    latencies = []
    try:
        consumer.receive(32, 10)  # drain and warm up
        for i in range(args["count"]):
            box: dict[str, float] = {}

            def send(i: int = i, box: dict[str, float] = box) -> None:
                time.sleep(0.05)  # the consumer is in its long poll by now
                msg = Message()
                msg.topic = args["topic"]
                msg.body = f"lat-{i}".encode()
                box["t"] = time.perf_counter()
                producer.send(msg)

            t = threading.Thread(target=send)
            t.start()
            got = consumer.receive(32, 10)
            done = time.perf_counter()
            t.join()
            for m in got:
                consumer.ack(m)
            if got and "t" in box:
                latencies.append((done - box["t"]) * 1000)
    finally:
        producer.shutdown()
        consumer.shutdown()
    return {"latencies_ms": latencies}


def scenario_throughput(args: dict[str, Any]) -> dict[str, Any]:
    """Send ``count`` messages of ``size`` bytes (``threads`` senders), then receive and ack them
    all (``threads`` consumers of one group): messages per second of each phase."""
    producer = Producer(_config(args), (args["topic"],))
    producer.startup()
    body = b"x" * args["size"]
    count, threads = args["count"], args["threads"]
    try:
        producer.send(_msg(args["topic"], body))  # warm up
        begin = time.perf_counter()
        futures = []
        for _ in range(count):
            futures.append(producer.send_async(_msg(args["topic"], body)))
            if len(futures) >= args.get("window", 256):
                futures.pop(0).result()
        for f in futures:
            f.result()
        send_s = time.perf_counter() - begin
    finally:
        producer.shutdown()
    consumer = _simple(args, 2)
    received = 0
    done_at: list[float] = []
    lock = threading.Lock()
    try:
        begin = time.perf_counter()

        def work() -> None:
            nonlocal received
            idle = 0
            while True:
                with lock:
                    if received >= count + 1:
                        return
                got = consumer.receive(32, 30)
                if not got:
                    idle += 1
                    if idle > 2:
                        return
                    continue
                for m in got:
                    consumer.ack(m)
                with lock:
                    received += len(got)
                    if received >= count + 1 and not done_at:
                        done_at.append(time.perf_counter())

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        recv_s = (done_at[0] if done_at else time.perf_counter()) - begin
    finally:
        consumer.shutdown()
    return {
        "sent": count,
        "send_per_s": count / send_s,
        "received": received,
        "receive_per_s": received / recv_s,
    }


def scenario_transaction(args: dict[str, Any]) -> dict[str, Any]:
    """A transactional producer sends ``messages`` ({body, end: commit | rollback | open}), each
    in a transaction of its own; an open one is left to the broker's check, whose checker
    commits bodies starting with ``commit`` and rolls back the rest. Waits until the bodies in
    ``expect_checked`` were checked (or ``limit_s``)."""
    checked: list[str] = []
    lock = threading.Lock()

    class Checker(TransactionChecker):
        def check(self, message: Any) -> Any:
            body = message.body.decode()
            with lock:
                checked.append(body)
            if body.startswith("commit"):
                return TransactionResolution.COMMIT
            return TransactionResolution.ROLLBACK

    producer = Producer(_config(args), (args["topic"],), checker=Checker())
    producer.startup()
    receipts = []
    try:
        for spec in args["messages"]:
            transaction = producer.begin_transaction()
            receipt = producer.send(_msg(args["topic"], spec["body"].encode()), transaction)
            receipts.append(
                {"message_id": receipt.message_id, "transaction_id": receipt.transaction_id}
            )
            if spec["end"] == "commit":
                transaction.commit()
            elif spec["end"] == "rollback":
                transaction.rollback()
        end = time.monotonic() + args.get("limit_s", 20)
        while time.monotonic() < end:
            with lock:
                if set(args.get("expect_checked", [])) <= set(checked):
                    break
            time.sleep(0.1)
        time.sleep(args.get("settle_s", 1.0))
    finally:
        producer.shutdown()
    return {"receipts": receipts, "checked": checked}


def scenario_recall(args: dict[str, Any]) -> dict[str, Any]:
    """Send ``keep`` and ``recall`` with a delivery time ``delay_s`` ahead, recall the second
    through its recall handle; then recall the first after its time (refused)."""
    producer = Producer(_config(args), (args["topic"],))
    producer.startup()
    out: dict[str, Any] = {}
    try:
        receipts = {}
        for body in ("keep", "recall"):
            m = _msg(args["topic"], body.encode())
            m.delivery_timestamp = int(time.time()) + args["delay_s"]
            receipts[body] = producer.send(m)
        out["recall_handles"] = all(r.recall_handle for r in receipts.values())
        out["recalled_id"] = producer.recall_message(
            args["topic"], receipts["recall"].recall_handle
        )
        out["recall_message_id"] = receipts["recall"].message_id
        time.sleep(args["delay_s"] + 1.5)
        try:
            producer.recall_message(args["topic"], receipts["keep"].recall_handle)
            out["late_recall"] = "accepted"
        except Exception as exc:
            out["late_recall"] = f"{type(exc).__name__}: {getattr(exc, 'code', '')}"
    finally:
        producer.shutdown()
    return out


def scenario_fifo_produce(args: dict[str, Any]) -> dict[str, Any]:
    """Send ``messages`` ({body, group}) to ``topic`` in order, each with its message group."""
    producer = Producer(_config(args), (args["topic"],))
    producer.startup()
    try:
        for spec in args["messages"]:
            m = _msg(args["topic"], spec["body"].encode())
            m.message_group = spec["group"]
            producer.send(m)
    finally:
        producer.shutdown()
    return {"sent": len(args["messages"])}


def scenario_fifo_push(args: dict[str, Any]) -> dict[str, Any]:
    """PushConsumer of a FIFO group: the order messages are consumed in, per message group;
    bodies in ``fail_once`` fail their first attempt."""
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()
    fail_once = set(args.get("fail_once", []))
    failures = len(fail_once)

    class Listener(MessageListener):
        def consume(self, message: Any) -> ConsumeResult:
            out = _message_out(message)
            out["group"] = message.message_group
            with lock:
                seen.append(out)
                if out["body"] in fail_once:
                    fail_once.discard(out["body"])  # the client retries it locally, in order
                    return ConsumeResult.FAILURE
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        _config(args),
        args["group"],
        Listener(),
        {args["topic"]: FilterExpression("*")},
    )
    consumer.startup()
    try:
        end = time.monotonic() + args.get("limit_s", 20)
        while time.monotonic() < end:
            with lock:
                done = {s["body"] for s in seen}
            if len(done) >= args["expect"] and len(seen) >= args["expect"] + failures:
                break
            time.sleep(0.1)
        time.sleep(args.get("settle_s", 0.5))
        fifo = consumer.fifo if hasattr(consumer, "fifo") else None
    finally:
        consumer.shutdown()
    return {"seen": seen, "fifo": fifo}


def _msg(topic: str, body: bytes) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    return m


def main() -> None:
    args = json.loads(sys.argv[1])
    result = globals()[f"scenario_{args['scenario']}"](args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

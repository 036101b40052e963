"""Client side of the interop tests: the official ``rocketmq`` 0.4.4 package (RocketMQ's C++
client), run by tests/support/interop.py in a virtualenv of its own, never imported by the test suite.

Every command prints JSON lines on standard output (flushed at once), one per message sent or
received, and ends on its own (a count reached or a time limit):

    send    --namesrv NS --group G --topic T --spec JSON     (a list of messages to send; an
            item {"batch": [...]} is one send_batch, an item with "shard" one send_orderly)
    pull    --namesrv NS --group G --topic T --expect N [--expr E] [--timeout S]
    push    --namesrv NS --group G --topic T --expect N [--expr E] [--fail-first | --fail-always]
            [--orderly] [--linger S] [--timeout S]
    flood   --namesrv NS --group G --topic T --count N    (send_sync of "G-<i>" until a send
            fails)
    stream  --namesrv NS --group G --topic T --count N [--interval S]   (send_sync of
            "G-<i>" (body and KEYS) one after another, whatever each send gives, until N were
            tried or standard input closes; a line before each send and one with its outcome)

Each takes ``--access-key AK --secret-key SK [--channel C]``: requests signed for an ACL
broker (the client's set_session_credentials).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import MSG_CALLBACK_FUNC, dll

CONSUME_SUCCESS = 0
RECONSUME_LATER = 1
_out_lock = threading.Lock()
_started = time.monotonic()


def emit(doc: dict) -> None:
    with _out_lock:
        doc.setdefault("t", round(time.monotonic() - _started, 3))
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()


def text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def describe(msg: RecvMessage, props: list[str]) -> dict:
    return {
        "topic": msg.topic,
        "tags": text(msg.tags),
        "keys": text(msg.keys),
        "body": text(msg.body),
        "id": msg.id,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "commit_log_offset": msg.commit_log_offset,
        "props": {name: text(msg.get_property(name)) for name in props},
    }


def credentials(client: Producer | PullConsumer | PushConsumer, args: argparse.Namespace) -> None:
    if args.access_key:
        client.set_session_credentials(args.access_key, args.secret_key, args.channel)


def producer(args: argparse.Namespace) -> Producer:
    p = Producer(args.group, timeout=args.send_timeout_ms)
    p.set_namesrv_addr(args.namesrv)
    credentials(p, args)
    p.start()
    return p


def message(topic: str, item: dict) -> Message:
    msg = Message(topic)
    msg.set_body(item["body"])
    if item.get("tags"):
        msg.set_tags(item["tags"])
    if item.get("keys"):
        msg.set_keys(item["keys"])
    for name, value in (item.get("props") or {}).items():
        msg.set_property(name, value)
    if item.get("delay"):
        msg.set_delay_time_level(int(item["delay"]))
    return msg


def send_orderly(p: Producer, msg: Message, shard: int) -> Any:
    """send_orderly, asked again while the client has no route for the topic: the C++ client
    gives up on its name-server request after 3 s on a loaded machine, and says so before it
    sends anything (its send_sync retries by itself; send_orderly does not)."""
    for attempt in range(5):
        try:
            return p.send_orderly(msg, shard)
        except Exception as exc:
            if "No route info" not in str(exc) or attempt == 4:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def cmd_send(args: argparse.Namespace) -> None:
    p = producer(args)
    try:
        for item in json.loads(args.spec):
            if "batch" in item:  # {"batch": [message, ...]}: one send_batch
                r = p.send_batch([message(args.topic, m) for m in item["batch"]])
                emit({"batch": [m["body"] for m in item["batch"]], "status": r.status.name})
                continue
            msg = message(args.topic, item)
            if "shard" in item:  # send_orderly: the queue is the shard modulo the queue count
                r = send_orderly(p, msg, int(item["shard"]))
                emit({"body": item["body"], "status": r.status.name, "msg_id": r.msg_id})
                continue
            if item.get("oneway"):
                p.send_oneway(msg)
                emit({"body": item["body"], "status": "ONEWAY"})
                continue
            r = p.send_sync(msg)
            emit({"body": item["body"], "status": r.status.name, "msg_id": r.msg_id})
    finally:
        p.shutdown()


def cmd_flood(args: argparse.Namespace) -> None:
    """send_sync one message after another; each SEND_OK is printed before the next send."""
    p = producer(args)
    try:
        for i in range(args.count):
            msg = Message(args.topic)
            body = f"{args.group}-{i}"
            msg.set_body(body)
            try:
                r = p.send_sync(msg)
            except Exception as exc:  # the broker went away
                emit({"error": str(exc)[:200], "body": body})
                return
            emit({"body": body, "status": r.status.name})
    finally:
        emit({"done": True})
        sys.stdout.flush()
        # shutting the C++ producer down while its broker is gone can hang: leave at once
        os._exit(0)


def cmd_stream(args: argparse.Namespace) -> None:
    """The fault harness's producer: every send is tried and reported, failures too."""
    p = producer(args)
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()  # the harness closes it to stop the stream
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        for i in range(args.count):
            if stop.is_set():
                break
            key = f"{args.group}-{i}"
            msg = Message(args.topic)
            msg.set_body(key)
            msg.set_keys(key)
            emit({"sending": key})
            try:
                r = p.send_sync(msg)
            except Exception as exc:
                emit({"key": key, "error": str(exc)[:200]})
            else:
                emit({"key": key, "status": r.status.name, "msg_id": r.msg_id})
            if args.interval:
                time.sleep(args.interval)
    finally:
        emit({"done": True})
        sys.stdout.flush()
        os._exit(0)  # the C++ producer's shutdown can hang while a broker is gone


def cmd_pull(args: argparse.Namespace) -> None:
    c = PullConsumer(args.group)
    c.set_namesrv_addr(args.namesrv)
    credentials(c, args)
    c.start()
    seen = 0
    deadline = time.monotonic() + args.timeout
    try:
        while seen < args.expect and time.monotonic() < deadline:
            for msg in c.pull(args.topic, args.expr):
                emit(describe(msg, args.prop))
                seen += 1
            if seen < args.expect:
                time.sleep(0.2)
    finally:
        c.shutdown()
    emit({"done": True, "count": seen})


def cmd_push(args: argparse.Namespace) -> None:
    consumer = PushConsumer(args.group, orderly=args.orderly)
    consumer.set_namesrv_addr(args.namesrv)
    credentials(consumer, args)
    consumer.set_thread_count(1)
    consumer.set_message_batch_max_size(1)
    failed_once: set[str] = set()
    lock = threading.Lock()
    state = {"delivered": 0, "accepted": 0}
    enough = threading.Event()

    def on_message(_consumer: int, handle: int) -> int:
        msg = RecvMessage(handle)
        doc = describe(msg, args.prop)
        with lock:
            state["delivered"] += 1
            if args.fail_always:
                verdict = RECONSUME_LATER
            elif args.fail_first and doc["body"] not in failed_once:
                failed_once.add(doc["body"])
                verdict = RECONSUME_LATER
            else:
                verdict = CONSUME_SUCCESS
                state["accepted"] += 1
            doc["verdict"] = "RECONSUME_LATER" if verdict else "CONSUME_SUCCESS"
            emit(doc)
            count = state["delivered"] if args.fail_always else state["accepted"]
            if count >= args.expect:
                enough.set()
        return verdict

    # the package's subscribe() re-raises the callback's exception, so its RECONSUME_LATER
    # never reaches the C++ side: register a callback that returns the status itself
    ffi_check(dll.Subscribe(consumer._handle, args.topic.encode(), args.expr.encode()))
    callback = MSG_CALLBACK_FUNC(on_message)
    consumer._callback_refs.append(callback)
    register = dll.RegisterMessageCallbackOrderly if args.orderly else dll.RegisterMessageCallback
    ffi_check(register(consumer._handle, callback))
    consumer.start()
    try:
        if enough.wait(args.timeout):
            time.sleep(args.linger)
    finally:
        emit({"stopping": True})
        consumer.shutdown()
    emit({"done": True, **state})


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("send", "pull", "push", "flood", "stream"):
        p = sub.add_parser(name)
        p.add_argument("--namesrv", required=True)
        p.add_argument("--group", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--expr", default="*")
        p.add_argument("--prop", action="append", default=[])
        p.add_argument("--expect", type=int, default=0)
        p.add_argument("--timeout", type=float, default=20.0)
        p.add_argument("--linger", type=float, default=0.0)
        p.add_argument("--spec", default="[]")
        p.add_argument("--count", type=int, default=0)
        p.add_argument("--send-timeout-ms", type=int, default=3000)
        p.add_argument("--fail-first", action="store_true")
        p.add_argument("--fail-always", action="store_true")
        p.add_argument("--orderly", action="store_true")
        p.add_argument("--access-key", default="")
        p.add_argument("--secret-key", default="")
        p.add_argument("--channel", default="ALIYUN")
        p.add_argument("--interval", type=float, default=0.0)
    args = parser.parse_args()
    commands = {
        "send": cmd_send,
        "pull": cmd_pull,
        "push": cmd_push,
        "flood": cmd_flood,
        "stream": cmd_stream,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main()

"""The command line speaks mqadmin's short flags where the meaning is the same (RocketMQ
4.9.8's tools: -n namesrvAddr, -t topic, -g group, -b broker, -c cluster, -r / -w queue
numbers, -p perm, -k / -v key and value, -s timestamp, -f force, true|false values ...) and
spells each option one way across its commands: a table of command lines parsed by the real
command definitions, a walk over every command, and the mqadmin forms run against a name
server and brokers."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import click
import pytest

from rocketstore.cli import main
from rocketstore.cli._common import parse_timestamp
from rocketstore.client._admin import AdminClient
from support.cluster import Cluster, invoke


def _command(argv: list[str]) -> tuple[click.Command, list[str]]:
    cmd: click.Command = main
    while isinstance(cmd, click.Group):
        name, argv = argv[0], argv[1:]
        found = cmd.commands.get(name)
        assert found is not None, name
        cmd = found
    return cmd, argv


def parse(*argv: str) -> dict[str, Any]:
    """The parameters a command line gives the command (parsed, not run)."""
    cmd, rest = _command(list(argv))
    # under main's context, as when run (its settings, -h among them, are inherited)
    with (
        main.make_context("rocketstore", [], resilient_parsing=True) as top,
        cmd.make_context(cmd.name or "", rest, parent=top) as ctx,
    ):
        return dict(ctx.params)


NS = "127.0.0.1:9999"
CASES: list[tuple[list[str], dict[str, Any]]] = [
    # updateTopic -n -t -c -b -r -w -p -o
    (["topic", "create", "-n", NS, "-t", "T", "-c", "C", "-r", "8", "-w", "4", "-p", "4"],
     {"namesrv": NS, "topic": "T", "cluster": "C", "read_queues": 8, "write_queues": 4,
      "perm": 4, "order": False}),
    (["topic", "create", "-t", "T", "-b", "1.2.3.4:10911", "-o", "true"],
     {"broker": "1.2.3.4:10911", "order": True}),
    (["topic", "create", "-t", "T", "--order"], {"order": True}),
    (["topic", "delete", "-n", NS, "-t", "T", "-c", "C"], {"topic": "T", "cluster": "C"}),
    (["topic", "route", "-n", NS, "-t", "T"], {"namesrv": NS, "topic": "T"}),
    # updateSubGroup -g -c -b -s -m -d -q -r -i -w -a
    (["group", "update", "-n", NS, "-g", "G", "-c", "C", "-s", "false", "-m", "true",
      "-d", "false", "-q", "2", "-r", "5", "-i", "1", "-w", "1", "-a", "false"],
     {"group": "G", "cluster": "C", "consume_enable_value": False, "consume_from_min_value": True,
      "broadcast_value": False, "retry_queue_nums": 2, "retry_max_times": 5, "broker_id": 1,
      "which_broker_when_consume_slowly": 1, "notify_ids_changed_value": False}),
    # deleteSubGroup -g -b -r
    (["group", "delete", "-n", NS, "-g", "G", "-b", "1.2.3.4:10911", "-r", "true"],
     {"group": "G", "broker": "1.2.3.4:10911", "remove_offset": True}),
    (["consumer", "progress", "-n", NS, "-g", "G"], {"group": "G"}),
    (["consumer", "connection", "-n", NS, "-g", "G"], {"group": "G"}),
    (["producer", "connection", "-n", NS, "-g", "P", "-t", "T"], {"group": "P", "topic": "T"}),
    # resetOffsetByTime -g -t -s -f
    (["consumer", "reset-offset", "-n", NS, "-g", "G", "-t", "T", "-s", "now", "-f", "false"],
     {"group": "G", "topic": "T", "when": "now", "force_value": False}),
    (["consumer", "reset-offset", "-g", "G", "-t", "T", "--time", "-1"], {"when": "-1"}),
    # cloneGroupOffset -s -d -t -o
    (["consumer", "clone-offset", "-s", "A", "-d", "B", "-t", "T", "-o", "true"],
     {"src_group": "A", "dest_group": "B", "topic": "T", "offline": True}),
    # consumerStatus -g -i
    (["consumer", "status", "-n", NS, "-g", "G", "-i", "127.0.0.1@1"],
     {"group": "G", "client_id": "127.0.0.1@1"}),
    # queryMsgByKey -t -k; queryMsgById -i
    (["message", "query", "-n", NS, "-t", "T", "-k", "K"], {"topic": "T", "key": "K"}),
    (["message", "view", "-n", NS, "-t", "T", "-i", "ID"], {"topic": "T", "msg_id": "ID"}),
    # updateBrokerConfig / getBrokerConfig -b -c -k -v; updateNamesrvConfig -k -v
    (["broker-config", "update", "-n", NS, "-b", "1.2.3.4:10911", "-k", "K", "-v", "V"],
     {"broker": "1.2.3.4:10911", "key": "K", "value": "V"}),
    (["broker-config", "get", "-n", NS, "-c", "C"], {"cluster": "C"}),
    (["namesrv-config", "update", "-n", NS, "-k", "K", "-v", "V"], {"key": "K", "value": "V"}),
    # wipeWritePerm / addWritePerm -b; updateKvConfig -s -k -v
    (["broker-perm", "wipe", "-n", NS, "-b", "broker-a"], {"broker_name": "broker-a"}),
    (["kv", "put", "-n", NS, "-s", "S", "-k", "K", "-v", "V"],
     {"namespace": "S", "key": "K", "value": "V"}),
    (["cluster", "list", "-n", NS, "-c", "C"], {"cluster": "C"}),
    (["broker-stats", "-n", NS, "-b", "1.2.3.4:10911", "--name", "N", "-k", "T"],
     {"stats_key": "T"}),
    # the client commands take the admin commands' -n, -t, -g, -k
    (["produce", "-n", NS, "-t", "T", "-k", "K", "-g", "P", "body"],
     {"namesrv": NS, "topic": "T", "keys": ("K",), "group": "P", "body": "body"}),
    (["consume", "-n", NS, "-t", "T", "-g", "G"], {"namesrv": NS, "topic": "T", "group": "G"}),
    (["export", "-n", NS, "-t", "T", "--to", "out"], {"namesrv": NS, "topics": ("T",)}),
    (["import", "-n", NS, "-t", "T", "--from", "in"], {"namesrv": NS, "topic": "T"}),
    # the store commands: -t, -k, and -c for a broker.conf as the servers (and mqbroker) take it
    (["put", "--store", "s", "-t", "T", "-k", "K", "-c", "b.conf", "x"],
     {"topic": "T", "keys": ("K",), "conf": "b.conf"}),
    (["query", "--store", "s", "-t", "T", "-k", "K", "-c", "b.conf"],
     {"topic": "T", "key": "K", "conf": "b.conf"}),
    (["get", "--store", "s", "-c", "b.conf", "T", "0", "0"], {"conf": "b.conf"}),
    (["stats", "--store", "s", "-c", "b.conf"], {"conf": "b.conf"}),
    (["broker", "-n", NS, "-c", "b.conf"], {"namesrv": NS, "conf": "b.conf"}),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "expected"), CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_mqadmin_flags_parse(argv: list[str], expected: dict[str, Any]) -> None:
    params = parse(*argv)
    assert {k: params[k] for k in expected} == expected


def test_the_name_server_comes_from_namesrv_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    """mqadmin and tools.sh read NAMESRV_ADDR: so does every command that takes -n, after -n
    itself."""
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.1:9876;10.0.0.2:9876")
    assert parse("topic", "list")["namesrv"] == "10.0.0.1:9876;10.0.0.2:9876"
    assert parse("consumer", "progress")["namesrv"] == "10.0.0.1:9876;10.0.0.2:9876"
    assert parse("console")["namesrv"] == "10.0.0.1:9876;10.0.0.2:9876"
    assert parse("topic", "list", "-n", NS)["namesrv"] == NS
    monkeypatch.delenv("NAMESRV_ADDR")
    assert parse("topic", "list")["namesrv"] == "127.0.0.1:9876"


def test_a_broker_takes_namesrv_addr_after_its_conf(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """RocketMQ's order for a broker: -n, then broker.conf's namesrvAddr, then NAMESRV_ADDR."""
    from rocketstore.cli._serve import _make_broker

    monkeypatch.setenv("NAMESRV_ADDR", "127.0.0.1:19876")
    args = (None, None, None, None, None, None, None)
    conf = tmp_path / "b.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 's'}\n")
    broker = _make_broker(None, str(conf), "127.0.0.1:0", None, *args)
    assert broker.config.namesrv_addr == "127.0.0.1:19876"
    conf.write_text(f"storePathRootDir={tmp_path / 's'}\nnamesrvAddr=127.0.0.1:29876\n")
    broker = _make_broker(None, str(conf), "127.0.0.1:0", None, *args)
    assert broker.config.namesrv_addr == "127.0.0.1:29876"
    broker = _make_broker(None, str(conf), "127.0.0.1:0", "127.0.0.1:39876", *args)
    assert broker.config.namesrv_addr == "127.0.0.1:39876"


def _commands(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[Any]:
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _commands(sub, (*path, name))
    else:
        yield path, cmd


# each long option's short form, wherever the option is (mqadmin's letters)
SHORT = {
    "--namesrv": "-n",
    "--topic": "-t",
    "--group": "-g",
    "--key": "-k",
    "--value": "-v",
    "--conf": "-c",
    "--broker": "-b",
}
# the broker's own cluster name: -c is its broker.conf there, as mqbroker's
NOT_SHORT = {(("broker",), "--cluster")}


def test_each_option_is_spelled_one_way_across_the_commands() -> None:
    seen: dict[str, set[str]] = {}
    for path, cmd in _commands():
        for param in cmd.params:
            if not isinstance(param, click.Option):
                continue
            longs = [o for o in param.opts if o.startswith("--")]
            shorts = [o for o in param.opts if not o.startswith("--")]
            for name in longs:
                seen.setdefault(name, set()).update(shorts)
                if name in SHORT:
                    assert SHORT[name] in shorts, (path, name, param.opts)
            if "--cluster" in longs and (path, "--cluster") not in NOT_SHORT:
                assert "-c" in shorts, (path, param.opts)
    # a long option never has two different short forms
    assert {n: s for n, s in seen.items() if len(s) > 1} == {}


def test_every_command_takes_h_for_help() -> None:
    for path, _cmd in _commands():
        result = invoke(*path, "-h")
        assert result.exit_code == 0 and "Usage:" in result.output, (path, result.output)


def test_mqadmin_timestamps() -> None:
    assert parse_timestamp("now", now_ms=lambda: 1234) == 1234
    assert parse_timestamp("1700000000000") == 1700000000000
    assert parse_timestamp("-1") == -1
    local = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000)
    assert parse_timestamp("2024-05-06#07:08:09:123") == int(local.timestamp() * 1000)
    for bad in ("-5", "yesterday", "2024-05-06 07:08:09"):
        with pytest.raises(click.BadParameter):
            parse_timestamp(bad)


def test_mqadmin_forms_against_the_servers(cluster: Cluster, admin: AdminClient) -> None:
    ns = cluster.namesrv
    name = cluster.brokers["broker-a"].config.cluster_name
    result = invoke("topic", "create", "-n", ns, "-t", "FlagTopic", "-c", name,
                    "-r", "8", "-w", "8")  # fmt: skip
    assert result.exit_code == 0, result.output
    route = admin.route("FlagTopic")
    assert route is not None
    assert {(q["readQueueNums"], q["writeQueueNums"]) for q in route.queue_data} == {(8, 8)}

    result = invoke("produce", "-n", ns, "-t", "FlagTopic", "-k", "flag-key", "hello")
    assert result.exit_code == 0 and "SEND_OK" in result.output, result.output
    result = invoke("consume", "-n", ns, "-t", "FlagTopic", "-g", "GFlags", "--from-beginning",
                    "--max-messages", "1", "--timeout", "30", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    got = json.loads(result.output.splitlines()[0])
    assert got["body"] == "hello" and got["keys"] == ["flag-key"]

    result = invoke("group", "update", "-n", ns, "-g", "GFlags", "-c", name,
                    "-s", "false", "-q", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    for addr in admin.masters(name).values():
        config = admin.subscription_groups(addr)["GFlags"]
        assert (config.consume_enable, config.retry_queue_nums) == (False, 2)

    # back to the start with mqadmin's -s TIMESTAMP -f true
    result = invoke("consumer", "reset-offset", "-n", ns, "-g", "GFlags", "-t", "FlagTopic",
                    "-s", "0", "-f", "true", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert {q["offset"] for q in json.loads(result.output)["queues"]} == {0}

"""The cluster: ``cluster list`` (mqadmin clusterList)."""

from __future__ import annotations

from typing import Any

import click

from ._admin_common import admin_client, dump_json, json_option, new_table, rich_console
from ._common import namesrv_option
from ._errors import ClientGroup


@click.group("cluster", cls=ClientGroup)
def cluster_group() -> None:
    """The brokers the name servers know (mqadmin clusterList)."""


@cluster_group.command("list")
@namesrv_option
@click.option("--cluster", "-c", default=None, help="only this cluster")
@click.option("--no-stats", is_flag=True, help="do not ask each broker for its runtime info")
@json_option
def cluster_list(namesrv: str, cluster: str | None, no_stats: bool, as_json: bool) -> None:
    """Every broker: cluster, broker name, id, address, and (from the broker) version and
    put / get TPS."""
    from ..client import ClientError
    from ..remoting import RemotingError

    rows: list[dict[str, Any]] = []
    with admin_client(namesrv) as admin:
        for b in admin.brokers(cluster):
            row: dict[str, Any] = {
                "cluster": b.cluster,
                "broker_name": b.broker_name,
                "broker_id": b.broker_id,
                "address": b.address,
            }
            if not no_stats:
                try:
                    info = admin.runtime_info(b.address)
                except (ClientError, RemotingError, ValueError) as exc:
                    row["error"] = str(exc)
                else:
                    row["version"] = info.get("brokerVersionDesc", "")
                    row["put_tps"] = _first_float(info.get("putTps", ""))
                    row["get_transferred_tps"] = _first_float(info.get("getTransferedTps", ""))
                    row["commit_log_max_offset"] = int(info.get("commitLogMaxOffset", 0) or 0)
                    if info.get("controllerRole"):  # controller mode
                        row["role"] = info["controllerRole"]
                        row["epoch"] = int(info.get("masterEpoch", -1) or -1)
                        row["sync_state_set"] = info.get("syncStateSet", "")
            rows.append(row)
    if as_json:
        dump_json(rows)
        return
    columns = [("Cluster", "left"), ("Broker Name", "left"), ("BID", "right"), ("Addr", "left")]
    roles = any("role" in row for row in rows)
    if not no_stats:
        columns += [("Version", "left"), ("InTPS", "right"), ("OutTPS", "right")]
        if roles:
            columns += [("Role", "left"), ("Epoch", "right"), ("SyncStateSet", "left")]
    table = new_table("brokers", columns)
    for row in rows:
        cells = [row["cluster"], row["broker_name"], str(row["broker_id"]), row["address"]]
        if not no_stats:
            if "error" in row:
                cells += ["unreachable", "-", "-"]
            else:
                cells += [
                    row["version"],
                    f"{row['put_tps']:.2f}",
                    f"{row['get_transferred_tps']:.2f}",
                ]
            if roles:
                cells += [
                    row.get("role", "-"),
                    str(row.get("epoch", "-")),
                    row.get("sync_state_set", "") or "-",
                ]
        table.add_row(*cells)
    rich_console().print(table)


def _first_float(text: str) -> float:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return 0.0


COMMANDS = [cluster_group]

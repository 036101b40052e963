"""RocketMQ 5.1.4's own programs for the controller-mode interop tests: a name server with its
embedded controller (``enableControllerInNamesrv``; the controller answers on the DLedger peer
port), brokers in controller mode, and mqadmin.

This project ships none of RocketMQ's classes: ``ROCKETMQ5_CLASSPATH`` names a classpath with
RocketMQ 5.1.4's namesrv, controller, broker and tools classes and their dependencies, and
``ROCKETMQ5_HOME`` (optional) a directory with ``conf/rmq.<role>.logback.xml`` (5.x logs through
logback; without one, the JVM's default, and each process's own directory as its
ROCKETMQ_HOME). Without the classpath or ``java`` the callers skip
(``unavailable()`` says why). Every process is killed at the end, also after a failure.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .java import JAVA, JavaProcess, command, small_options
from .ports import free_broker_port, free_port

CLASSPATH = os.environ.get("ROCKETMQ5_CLASSPATH", "")
HOME = os.environ.get("ROCKETMQ5_HOME", "")
JAVA_OPTS = small_options(heap="512m", direct="512m")
NAMESRV = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER = "org.apache.rocketmq.broker.BrokerStartup"
ADMIN = "org.apache.rocketmq.tools.command.MQAdminStartup"


def unavailable() -> str | None:
    if not CLASSPATH:
        return (
            "set ROCKETMQ5_CLASSPATH to RocketMQ 5.1.4's classes (see tests/support/rocketmq5.py)"
        )
    if JAVA is None:
        return "no java on PATH"
    return None


def _command(root: Path, name: str, role: str, main: str, *args: str) -> list[str]:
    """``main`` with a user.home of its own (``home-NAME``) and, given ROCKETMQ5_HOME, its
    logback configuration for ``role``."""
    home = root / f"home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    opts = list(JAVA_OPTS)
    if HOME:
        opts.append(f"-Dlogback.configurationFile={HOME}/conf/rmq.{role}.logback.xml")
    return command(CLASSPATH, main, *args, opts=opts, user_home=home)


def launch(root: Path, name: str, role: str, main: str, *args: str) -> JavaProcess:
    """``main`` started, its output in ``root/NAME.out``."""
    # the name server refuses to start without a ROCKETMQ_HOME: the process's own directory
    # when no ROCKETMQ5_HOME is given
    env = {**os.environ, "ROCKETMQ_HOME": HOME or str(root / f"home-{name}")}
    return JavaProcess(_command(root, name, role, main, *args), root / f"{name}.out", env)


def start_namesrv(root: Path) -> tuple[JavaProcess, str, str]:
    """A 5.1.4 name server with its controller: (process, name server address, controller
    address)."""
    ns, ctl = free_port(), free_port()
    conf = root / "namesrv.conf"
    conf.write_text(
        f"listenPort={ns}\n"
        "enableControllerInNamesrv=true\n"
        "controllerDLegerGroup=group1\n"
        f"controllerDLegerPeers=n0-127.0.0.1:{ctl}\n"
        "controllerDLegerSelfId=n0\n"
        f"controllerStorePath={root / 'controller-store'}\n"
        f"configStorePath={root / 'controller.properties'}\n"
        f"kvConfigPath={root / 'namesrv' / 'kvConfig.json'}\n"
    )
    proc = launch(root, "namesrv", "namesrv", NAMESRV, "-c", str(conf))
    try:
        proc.wait_for("The ControllerManager boot success", 120)
    except BaseException:
        proc.kill()
        raise
    return proc, f"127.0.0.1:{ns}", f"127.0.0.1:{ctl}"


def start_broker(
    root: Path, name: str, group: str, namesrv: str, controller: str, file_size: int
) -> tuple[JavaProcess, str]:
    """A 5.1.4 broker in controller mode: (process, its address)."""
    port = free_broker_port()
    conf = root / f"{name}.conf"
    conf.write_text(
        "brokerClusterName=DefaultCluster\n"
        f"brokerName={group}\n"
        "brokerId=-1\n"
        "brokerRole=SLAVE\n"
        "enableControllerMode=true\n"
        f"controllerAddr={controller}\n"
        "allAckInSyncStateSet=true\n"
        f"namesrvAddr={namesrv}\n"
        "brokerIP1=127.0.0.1\n"
        "brokerIP2=127.0.0.1\n"
        f"listenPort={port}\n"
        f"haListenPort={port + 1}\n"
        f"storePathRootDir={root / name}\n"
        f"storePathCommitLog={root / name / 'commitlog'}\n"
        f"mappedFileSizeCommitLog={file_size}\n"
        "flushDiskType=ASYNC_FLUSH\n"
    )
    proc = launch(root, name, "broker", BROKER, "-c", str(conf))
    try:
        proc.wait_for("boot success", 120)
    except BaseException:
        proc.kill()
        raise
    return proc, f"127.0.0.1:{port}"


def admin(root: Path, *args: str, timeout: float = 120.0) -> str:
    done = subprocess.run(
        _command(root, "admin", "tools", ADMIN, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return done.stdout + done.stderr

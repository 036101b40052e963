"""RocketMQ 5.1.4's own programs for the controller-mode interop tests: a name server with its
embedded controller (``enableControllerInNamesrv``; the controller answers on the DLedger peer
port), brokers in controller mode, and mqadmin.

This project ships none of RocketMQ's classes: ``ROCKETMQ5_CLASSPATH`` names a classpath with
RocketMQ 5.1.4's namesrv, controller, broker and tools classes and their dependencies, and
``ROCKETMQ5_HOME`` (optional) a directory with ``conf/rmq.<role>.logback.xml`` (5.x logs through
logback; without one, the JVM's default, and each process's own directory as its
ROCKETMQ_HOME). Without the classpath or ``java`` the callers skip
(``unavailable()`` says why). Every process is killed at the end, also after a failure.

RocketMQ 5.3's name server, broker (with its ACL 2.0) and mqadmin come the same way from
``ROCKETMQ53_CLASSPATH`` (``unavailable53()``). ``ROCKETMQ53_BROKER_CONF`` (optional) names a
file of broker.conf lines added to every 5.3 broker's, for what a build needs (a build without
RocksDB's native library names its own user and ACL storage classes there). Each 5.3 process
logs through ``-Dlogback.configurationFile`` to a file beside its output. mqadmin runs in one
JVM for many commands (``admin_runner53``, rocketmq_java's AdminRunner), signing with a Super
user's name and password from ``$ROCKETMQ_HOME/conf/tools.yml`` as RocketMQ's tools do.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .java import JAVA, JavaProcess, command, small_options
from .ports import free_broker_port, free_port
from .rocketmq_java import AdminRunner

CLASSPATH = os.environ.get("ROCKETMQ5_CLASSPATH", "")
CLASSPATH53 = os.environ.get("ROCKETMQ53_CLASSPATH", "")
BROKER_CONF53 = os.environ.get("ROCKETMQ53_BROKER_CONF", "")
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


def unavailable53() -> str | None:
    if not CLASSPATH53:
        return "set ROCKETMQ53_CLASSPATH to RocketMQ 5.3's classes (see tests/support/rocketmq5.py)"
    if JAVA is None:
        return "no java on PATH"
    return None


# a 5.3 process's log: to a file, not its standard output (mqadmin's output is its answer)
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5level %logger{{32}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def logback_file(root: Path, name: str) -> Path:
    path = root / f"logback-{name}.xml"
    path.write_text(_LOGBACK.format(log=root / f"{name}.log"))
    return path


def _command(
    root: Path, name: str, role: str, main: str, *args: str, classpath: str, logback: Path | None
) -> list[str]:
    """``main`` with a user.home of its own (``home-NAME``) and its logging configuration:
    ``logback``, else ROCKETMQ5_HOME's for ``role`` when given."""
    home = root / f"home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    opts = list(JAVA_OPTS)
    if logback is not None:
        opts.append(f"-Dlogback.configurationFile={logback}")
    elif HOME:
        opts.append(f"-Dlogback.configurationFile={HOME}/conf/rmq.{role}.logback.xml")
    return command(classpath or CLASSPATH, main, *args, opts=opts, user_home=home)


def launch(
    root: Path,
    name: str,
    role: str,
    main: str,
    *args: str,
    classpath: str = "",
    logback: Path | None = None,
) -> JavaProcess:
    """``main`` started, its output in ``root/NAME.out``. ``classpath``: default
    ``ROCKETMQ5_CLASSPATH``; ``logback``: the logging configuration (default
    ``ROCKETMQ5_HOME``'s for ``role``, if given)."""
    # the name server refuses to start without a ROCKETMQ_HOME: the process's own directory
    # when no ROCKETMQ5_HOME is given
    env = {**os.environ, "ROCKETMQ_HOME": HOME or str(root / f"home-{name}")}
    argv = _command(root, name, role, main, *args, classpath=classpath, logback=logback)
    return JavaProcess(argv, root / f"{name}.out", env)


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
        _command(root, "admin", "tools", ADMIN, *args, classpath="", logback=None),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return done.stdout + done.stderr


def start_namesrv53(root: Path) -> tuple[JavaProcess, str]:
    """A 5.3 name server: (process, address)."""
    port = free_port()
    conf = root / "namesrv53.conf"
    conf.write_text(
        f"listenPort={port}\n"
        f"kvConfigPath={root / 'namesrv53' / 'kvConfig.json'}\n"
        f"configStorePath={root / 'namesrv53' / 'namesrv.properties'}\n"
    )
    log = logback_file(root, "namesrv53")
    proc = launch(
        root, "namesrv53", "namesrv", NAMESRV, "-c", str(conf), classpath=CLASSPATH53, logback=log
    )
    try:
        proc.wait_for("boot success", 120)
    except BaseException:
        proc.kill()
        raise
    return proc, f"127.0.0.1:{port}"


def start_broker53(root: Path, name: str, namesrv: str, **conf: str) -> tuple[JavaProcess, str]:
    """A 5.3 master broker ``name`` of ``DefaultCluster``, with ``conf``'s broker.conf keys
    (and ``ROCKETMQ53_BROKER_CONF``'s lines): (process, address)."""
    port = free_broker_port()
    keys = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": name,
        "brokerId": "0",
        "brokerIP1": "127.0.0.1",
        "listenPort": str(port),
        "haListenPort": str(port + 1),
        "namesrvAddr": namesrv,
        "storePathRootDir": str(root / name),
        "storePathCommitLog": str(root / name / "commitlog"),
        "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
        "flushDiskType": "ASYNC_FLUSH",
        **conf,
    }
    text = "".join(f"{k}={v}\n" for k, v in keys.items())
    if BROKER_CONF53:
        text += Path(BROKER_CONF53).read_text()
    path = root / f"{name}.conf"
    path.write_text(text)
    log = logback_file(root, name)
    proc = launch(root, name, "broker", BROKER, "-c", str(path), classpath=CLASSPATH53, logback=log)
    try:
        proc.wait_for("boot success", 120)
    except BaseException:
        proc.kill()
        raise
    return proc, f"127.0.0.1:{port}"


def admin_runner53(root: Path, access_key: str, secret_key: str) -> AdminRunner:
    """5.3's mqadmin in one JVM, signing as ``access_key`` / ``secret_key``."""
    home = root / "rocketmq-home"
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "tools.yml").write_text(f"accessKey: {access_key}\nsecretKey: {secret_key}\n")
    env = dict(os.environ)
    env["ROCKETMQ_HOME"] = str(home)
    log = logback_file(root, "mqadmin53")
    return AdminRunner(
        root,
        classpath=CLASSPATH53,
        opts=[*JAVA_OPTS, f"-Dlogback.configurationFile={log}"],
        env=env,
        clients=False,
    )

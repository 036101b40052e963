"""The server commands of ``rocketstore``: namesrv, broker, serve."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from ..metrics._auth import AUTH_HELP as METRICS_AUTH_HELP
from ..metrics._auth import check_auth_option
from ..metrics._server import LISTEN_HELP as METRICS_LISTEN_HELP
from ..metrics._server import check_listen_option
from ..store._config import StoreConfig
from ._common import NAMESRV_ENV, https_options, tls_server_options


def _split_listen(value: str, default_port: int) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        return value or "127.0.0.1", default_port
    if not port.isdigit():
        raise click.BadParameter(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def _logging(
    verbose: bool,
    log_dir: str | None,
    log_level: str,
    log_levels: str | None,
    store_dir: str | None = None,
    conf: str | None = None,
) -> None:
    """Log files under ``log_dir`` (default: ``logs/<store name>/`` beside the store,
    ``./logs`` for a name server alone); standard error shows warnings, or everything logged
    with -v. A fatal signal leaves the Python stacks in ``fatal.log`` there."""
    from pathlib import Path

    from .._logs import (
        LogConfig,
        LogConfigError,
        configure,
        default_directory,
        enable_fatal_stacks,
    )

    if log_dir is None:
        root = store_dir
        if root is None and conf:
            root = StoreConfig.from_broker_conf(conf).store_path_root_dir
        directory = default_directory(root) if root else Path("logs")
    else:
        directory = Path(log_dir)
    try:
        configure(
            LogConfig(
                directory,
                level=log_level,
                levels_file=Path(log_levels) if log_levels else None,
                stderr_level="INFO" if verbose else "WARNING",
            )
        )
        enable_fatal_stacks(directory)
    except LogConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--log-*") from None
    _announce(f"logs in {directory}")


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run servers until they stop; a start-up failure (a port in use, a store owned by
    another process, a controller state file that does not decode) is one line on standard
    error and exit status 1, not a traceback."""
    from ..metrics._auth import MetricsAuthError
    from ..protocol._errors import ControllerError
    from ..store._errors import StoreError

    try:
        asyncio.run(main)
    except (OSError, StoreError, ControllerError, MetricsAuthError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


def _announce(text: str) -> None:
    click.echo(text)
    sys.stdout.flush()


def _store_dir(store: str | None, conf: str | None, default: str | None) -> str | None:
    """The store directory a command runs on: ``--store`` when given on the command line, else
    the broker.conf's storePathRootDir when it names one (None: keep the conf's), else
    ``default``. UsageError when there is none."""
    from ..store._errors import StoreConfigError

    ctx = click.get_current_context()
    given = ctx.get_parameter_source("store") not in (
        click.core.ParameterSource.DEFAULT,
        click.core.ParameterSource.DEFAULT_MAP,
        None,
    )
    named = False
    if conf:
        try:
            conf_root = StoreConfig.from_broker_conf(conf).store_path_root_dir
        except StoreConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--conf") from None
        # a conf naming RocketMQ's default (~/store) is taken for one naming none
        named = conf_root != StoreConfig().store_path_root_dir
    if not given and named:
        return None  # the conf's storePathRootDir
    chosen = store if given else default
    if chosen is None:
        raise click.UsageError("give --store, or a broker.conf (-c) with storePathRootDir")
    return chosen


def _make_broker(
    store: str | None,
    conf: str | None,
    listen: str | None,
    namesrv: str | None,
    broker_name: str | None,
    cluster: str | None,
    broker_id: int | None,
    role: str | None,
    flush: str | None,
    ha_listen: str | None = None,
    ha_master: str | None = None,
    grpc: Any = None,
    acl_file: str | None = None,
    tiered_dir: str | None = None,
    controller: str | None = None,
    inner_account: Any = None,
    tls: Any = None,
) -> Any:
    from ..broker._config import BrokerConfig
    from ..server import BrokerServer

    base = StoreConfig.from_broker_conf(conf) if conf else StoreConfig()
    store_over: dict[str, Any] = {}
    if store is not None:
        store_over["store_path_root_dir"] = store
    if role:
        store_over["broker_role"] = role
    if flush:
        store_over["flush_disk_type"] = flush
    # no --listen: the conf's listenPort (RocketMQ's default 10911 without one)
    host, port = (
        _split_listen(listen, base.store_port) if listen else ("127.0.0.1", base.store_port)
    )
    if ha_listen:
        ha_host, ha_port = _split_listen(ha_listen, port + 1)
        store_over["ha_listen_port"] = ha_port
        store_over["ha_listen_host"] = ha_host
    else:
        # the listen port + 1 as RocketMQ does; with port 0 (chosen at start), any free port
        store_over["ha_listen_port"] = port + 1 if port else 0
    if ha_master:
        store_over["ha_master_address"] = ha_master
    if tiered_dir:
        store_over["tiered_dir"] = tiered_dir
    if controller:
        store_over["enable_controller_mode"] = True
    store_config = dataclasses.replace(base, **store_over)
    broker_config = BrokerConfig.from_store_config(
        store_config,
        listen_host=host,
        listen_port=port,
        namesrv_addr=namesrv,
        broker_name=broker_name,
        cluster_name=cluster,
        broker_id=broker_id,
        acl_enable=True if acl_file else None,
        acl_file=acl_file,
        config_file=conf,
        controller_addr=controller,
        enable_controller_mode=True if controller else None,
        tls=tls,
    )
    if not broker_config.namesrv_addr and os.environ.get(NAMESRV_ENV):
        # RocketMQ's order: -n, then the conf's namesrvAddr, then the environment
        broker_config = dataclasses.replace(broker_config, namesrv_addr=os.environ[NAMESRV_ENV])
    if role == "SLAVE" and broker_config.broker_id == 0:
        broker_config = dataclasses.replace(broker_config, broker_id=1)
    return BrokerServer(store_config, broker_config, grpc=grpc, inner_account=inner_account)


listen_help = "HOST:PORT to listen on (127.0.0.1 unless told otherwise)"
broker_listen_help = (
    "HOST:PORT to listen on (default 127.0.0.1 and the conf's listenPort, else 10911)"
)
F = TypeVar("F", bound=Callable[..., Any])


def verbose_option(f: F) -> F:
    """-v and the log files' options (--log-dir, --log-level, --log-levels)."""
    for option in reversed(
        (
            click.option(
                "-v", "--verbose", is_flag=True, help="show INFO lines on standard error too"
            ),
            click.option(
                "--log-dir",
                default=None,
                help=(
                    "where the log files go (default: logs/<store name>/ beside the store, or "
                    "beside the controller's store; ./logs for a name server alone)"
                ),
            ),
            click.option(
                "--log-level",
                type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
                default="INFO",
                show_default=True,
                help="level of the log files",
            ),
            click.option(
                "--log-levels",
                default=None,
                help="a file of name=LEVEL lines setting single loggers (rocketstore.store=DEBUG)",
            ),
        )
    ):
        f = option(f)
    return f


def grpc_options(default_listen: str | None) -> Callable[[F], F]:
    """--grpc-listen / --grpc-acl / --grpc-tls-cert / --grpc-tls-key."""
    file_type = click.Path(exists=True, dir_okay=False)

    def add(fn: F) -> F:
        for option in reversed(
            [
                click.option(
                    "--grpc-listen",
                    default=default_listen,
                    show_default=default_listen is not None,
                    help="serve RocketMQ 5.x gRPC clients on HOST:PORT ('' for none)",
                ),
                click.option(
                    "--acl-file",
                    default=None,
                    type=file_type,
                    help="ACL on every port: a plain_acl.yml (default with broker.conf's "
                    "aclEnable=true: $ROCKETMQ_HOME/conf/plain_acl.yml)",
                ),
                click.option(
                    "--grpc-acl",
                    default=None,
                    type=file_type,
                    help="the same as --acl-file (an older name)",
                ),
                click.option(
                    "--grpc-tls-cert", default=None, type=file_type, help="TLS cert (PEM)"
                ),
                click.option("--grpc-tls-key", default=None, type=file_type, help="TLS key (PEM)"),
            ]
        ):
            fn = option(fn)
        return fn

    return add


def _grpc_config(listen: str | None, acl: str | None, cert: str | None, key: str | None) -> Any:
    from ..grpc import grpc_config_from_cli
    from ..store._errors import StoreConfigError

    try:
        return grpc_config_from_cli(listen, acl_file=acl, tls_cert=cert, tls_key=key)
    except StoreConfigError as exc:
        raise click.BadParameter(str(exc)) from None


def controller_config(conf: str | None, overrides: dict[str, str]) -> Any:
    """The ControllerConfig of a properties file (controller.conf or namesrv.conf) with the
    command line's settings (RocketMQ's property names) over it; a bad one is a usage error."""
    from ..controller import ControllerConfig, ControllerConfigError
    from ..protocol._properties import PropertiesError, parse_properties

    values: dict[str, str] = {}
    if conf:
        try:
            with open(conf, "rb") as f:
                values = parse_properties(f.read())
        except (OSError, PropertiesError) as exc:
            raise click.BadParameter(f"{conf}: {exc}", param_hint="--conf") from None
    values.update(overrides)
    try:
        return ControllerConfig.from_properties(values)
    except ControllerConfigError as exc:
        raise click.BadParameter(str(exc)) from None


def _name_server(
    host: str,
    port: int,
    kv_config: str,
    acl_path: str | None = None,
    inner: Any = None,
    tls: Any = None,
) -> Any:
    """A NameServer keeping its KV config in ``kv_config``, checking every request against
    the ACL file ``acl_path`` (None: no ACL) with the process's own account ``inner`` added;
    a file that cannot be used ends the command with one line."""
    from ..acl import AclConfigError, AclFile, WithAccounts
    from ..namesrv import KVConfigError, NameServer

    acl: Any = None
    if acl_path is not None:
        try:
            acl = AclFile(acl_path)
        except AclConfigError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        if inner is not None:
            acl = WithAccounts(acl, [inner])
    try:
        return NameServer(host, port, kv_config_path=kv_config, acl=acl, tls=tls)
    except (KVConfigError, OSError) as exc:
        click.echo(f"error: KV config: {exc}", err=True)
        sys.exit(1)


def _acl_path(conf: str | None, acl_file: str | None) -> str | None:
    """The ACL file a broker started with ``conf`` and ``--acl-file`` checks (None: none)."""
    from ..broker._config import BrokerConfig
    from ..store._errors import StoreConfigError

    try:
        base = StoreConfig.from_broker_conf(conf) if conf else StoreConfig()
        config = BrokerConfig.from_store_config(
            base, acl_enable=True if acl_file else None, acl_file=acl_file
        )
    except StoreConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--conf") from None
    return config.acl_path


def _given(name: str) -> bool:
    """Whether option ``name`` of the running command was given on the command line."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (
        click.core.ParameterSource.DEFAULT,
        click.core.ParameterSource.DEFAULT_MAP,
        None,
    )


controller_listen_option = click.option(
    "--controller-listen",
    default=None,
    help="run RocketMQ 5's controller in this process, on HOST:PORT (its own port, as "
    "enableControllerInNamesrv does)",
)


@click.command("namesrv")
@click.option("-c", "--conf", default=None, help="a namesrv.conf (listenPort, kvConfigPath, "
              "enableControllerInNamesrv and the controller's keys)")  # fmt: skip
@click.option("--listen", default="127.0.0.1:9876", show_default=True, help=listen_help)
@click.option(
    "--acl-file",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="ACL on: a plain_acl.yml; registrations, write permissions, the KV config and the "
    "settings need a signed admin account, reads any signed account",
)
@click.option(
    "--kv-config",
    default=os.path.join("~", "namesrv", "kvConfig.json"),
    show_default=True,
    help="the file of the KV config (RocketMQ's kvConfigPath)",
)
@controller_listen_option
@verbose_option
@tls_server_options
def namesrv_cmd(
    conf: str | None,
    listen: str,
    acl_file: str | None,
    kv_config: str,
    controller_listen: str | None,
    verbose: bool,
    log_dir: str | None,
    log_level: str,
    log_levels: str | None,
    tls: Any,
) -> None:
    """Run a name server (routes; brokers register with it), with RocketMQ 5's controller
    beside it when the conf has enableControllerInNamesrv=true or --controller-listen is
    given."""
    from ..controller import enabled_in_namesrv
    from ..protocol._properties import PropertiesError, parse_properties
    from ..server import ControllerServer, run_servers

    values: dict[str, str] = {}
    if conf:
        try:
            with open(conf, "rb") as f:
                values = parse_properties(f.read())
        except (OSError, PropertiesError) as exc:
            raise click.BadParameter(f"{conf}: {exc}", param_hint="--conf") from None
    if not _given("listen") and "listenPort" in values:
        listen = f"127.0.0.1:{values['listenPort']}"
    if not _given("kv_config") and "kvConfigPath" in values:
        kv_config = values["kvConfigPath"]
    controller = None
    if controller_listen is not None or enabled_in_namesrv(values):
        overrides = {"controllerListen": controller_listen} if controller_listen else {}
        controller = ControllerServer(
            controller_config(conf, overrides), acl_file=acl_file, tls=tls
        )
    _logging(verbose, log_dir, log_level, log_levels)
    host, port = _split_listen(listen, 9876)
    ns = _name_server(host, port, os.path.expanduser(kv_config), acl_file, tls=tls)
    if acl_file:
        _announce(f"ACL on the name server: {acl_file}")
    _run(run_servers(ns, [], announce=_announce, controller=controller))


metrics_option = click.option(
    "--metrics-listen", default=None, callback=check_listen_option, help=METRICS_LISTEN_HELP
)
metrics_auth_option = click.option(
    "--metrics-auth", default=None, callback=check_auth_option, help=METRICS_AUTH_HELP
)


def _check_console_listen(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value:
        try:
            _split_listen(value, 8080)
        except click.BadParameter as exc:
            raise click.BadParameter(exc.message, ctx, param) from None
    return value


console_option = click.option(
    "--console-listen",
    default=None,
    callback=_check_console_listen,
    help="HOST:PORT of the web console (default 127.0.0.1:8080 when free; '' for none)",
)
role_option = click.option(
    "--role",
    type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]),
    default=None,
    help="broker role (default ASYNC_MASTER or the conf's brokerRole)",
)
tiered_option = click.option(
    "--tiered-dir",
    default=None,
    help="keep sealed commit-log files' messages as Parquet here (default: the conf's "
    "tieredDir; none: off)",
)
controller_option = click.option(
    "--controller",
    "controller_addr",
    default=None,
    help="controller mode: the controllers HOST:PORT[;HOST:PORT] give the broker its role "
    "(enableControllerMode=true, controllerAddr)",
)
ha_listen_option = click.option(
    "--ha-listen",
    default=None,
    help="HOST:PORT slaves replicate from (default: 127.0.0.1, whatever --listen says, since "
    "it takes no credentials, and the broker's port + 1, as RocketMQ's haListenPort)",
)
flush_option = click.option(
    "--flush",
    type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]),
    default=None,
    help="flush disk type (default ASYNC_FLUSH or the conf's flushDiskType)",
)


@click.command("broker")
@click.option(
    "--store", default=None, help="store directory (default: the conf's storePathRootDir)"
)
@click.option("-c", "--conf", default=None, help="a RocketMQ broker.conf")
@click.option("--listen", default=None, help=broker_listen_help)
@click.option(
    "--namesrv",
    "-n",
    default=None,
    help=f"name server HOST:PORT[;HOST:PORT] (default: the conf's namesrvAddr, else ${NAMESRV_ENV})",
)
@click.option("--broker-name", default=None, help="broker name (default broker-a)")
@click.option("--cluster", default=None, help="cluster name (default DefaultCluster)")
@click.option("--broker-id", type=int, default=None, help="0 for a master, >= 1 for a slave")
@role_option
@flush_option
@ha_listen_option
@click.option("--ha-master", default=None, help="a slave's master HA address HOST:PORT")
@controller_option
@tiered_option
@grpc_options(None)
@metrics_option
@metrics_auth_option
@verbose_option
@tls_server_options
@https_options
def broker_cmd(
    store: str | None,
    conf: str | None,
    listen: str | None,
    namesrv: str | None,
    broker_name: str | None,
    cluster: str | None,
    broker_id: int | None,
    role: str | None,
    flush: str | None,
    ha_listen: str | None,
    ha_master: str | None,
    controller_addr: str | None,
    tiered_dir: str | None,
    grpc_listen: str | None,
    acl_file: str | None,
    grpc_acl: str | None,
    grpc_tls_cert: str | None,
    grpc_tls_key: str | None,
    metrics_listen: str | None,
    metrics_auth: str | None,
    verbose: bool,
    log_dir: str | None,
    log_level: str,
    log_levels: str | None,
    tls: Any,
    https: Any,
) -> None:
    """Run a broker over a store directory."""
    from ..server import run_servers

    store_dir = _store_dir(store, conf, None)
    _logging(verbose, log_dir, log_level, log_levels, store_dir, conf)
    broker = _make_broker(
        store_dir,
        conf,
        listen,
        namesrv,
        broker_name,
        cluster,
        broker_id,
        role,
        flush,
        ha_listen,
        ha_master,
        _grpc_config(grpc_listen, None, grpc_tls_cert, grpc_tls_key),
        acl_file or grpc_acl,
        tiered_dir,
        controller_addr,
        tls=tls,
    )
    _announce_tier(broker)
    _run(
        run_servers(
            None,
            [broker],
            announce=_announce,
            metrics_listen=metrics_listen,
            metrics_auth=metrics_auth,
            https=https,
        )
    )


@click.command("serve")
@click.option(
    "--store",
    default="store",
    show_default=True,
    help="store directory (without it, a conf's storePathRootDir when it has one)",
)
@click.option("-c", "--conf", default=None, help="a RocketMQ broker.conf")
@click.option("--namesrv-listen", default="127.0.0.1:9876", show_default=True, help=listen_help)
@click.option("--listen", default=None, help=broker_listen_help)
@flush_option
@controller_option
@ha_listen_option
@tiered_option
@grpc_options("127.0.0.1:8081")
@metrics_option
@metrics_auth_option
@console_option
@controller_listen_option
@verbose_option
@tls_server_options
@https_options
def serve_cmd(
    store: str,
    conf: str | None,
    namesrv_listen: str,
    listen: str | None,
    flush: str | None,
    controller_addr: str | None,
    ha_listen: str | None,
    tiered_dir: str | None,
    grpc_listen: str | None,
    acl_file: str | None,
    grpc_acl: str | None,
    grpc_tls_cert: str | None,
    grpc_tls_key: str | None,
    metrics_listen: str | None,
    metrics_auth: str | None,
    console_listen: str | None,
    controller_listen: str | None,
    verbose: bool,
    log_dir: str | None,
    log_level: str,
    log_levels: str | None,
    tls: Any,
    https: Any,
) -> None:
    """A name server and a broker in one process: the embedded default (with RocketMQ 5's
    controller too, its state under the store's controller/, with --controller-listen). Every
    port it opens is printed (name server, controller, broker, HA, gRPC, metrics, console);
    two of them on one port are refused before anything binds."""
    from ..remoting._tls import ENV_ENABLE
    from ..server import ControllerServer, run_servers
    from ..server._addresses import free_port

    if tls.mode == "enforcing":  # the broker's registrations with its name server speak it too
        os.environ.setdefault(ENV_ENABLE, "true")

    host, port = _split_listen(namesrv_listen, 9876)
    # the broker registers with the name server: a port chosen now, not at its start
    port = port or free_port(host)
    grpc = _grpc_config(grpc_listen, None, grpc_tls_cert, grpc_tls_key)
    store_dir = _store_dir(store, conf, "store")
    _logging(verbose, log_dir, log_level, log_levels, store_dir, conf)
    # the name server's KV config beside the store
    root = store_dir or StoreConfig.from_broker_conf(conf or "").store_path_root_dir
    # with ACL on, the name server (and a controller beside it) checks the broker's accounts,
    # and the two share an account of their own for the broker's registrations (unless
    # broker.conf names one)
    acl_path = _acl_path(conf, acl_file or grpc_acl)
    inner = None
    if acl_path is not None:
        from ..acl import process_account

        inner = process_account()
    ns = _name_server(
        host, port, os.path.join(root, "namesrv", "kvConfig.json"), acl_path, inner, tls=tls
    )
    controller = None
    if controller_listen is not None:
        controller = ControllerServer(
            controller_config(
                None,
                {
                    "controllerListen": controller_listen,
                    "controllerStorePath": os.path.join(root, "controller"),
                },
            ),
            acl_file=acl_path,
            inner_account=inner,
            tls=tls,
        )
    broker = _make_broker(
        store_dir,
        conf,
        listen,
        ns.address,
        None,
        None,
        None,
        None,
        flush,
        ha_listen,
        grpc=grpc,
        acl_file=acl_file or grpc_acl,
        tiered_dir=tiered_dir,
        controller=controller_addr,
        inner_account=inner,
        tls=tls,
    )
    if acl_path is not None:
        _announce(f"ACL on the name server: {acl_path}")
    _announce_tier(broker)
    _run(
        run_servers(
            ns,
            [broker],
            announce=_announce,
            metrics_listen=metrics_listen,
            metrics_auth=metrics_auth,
            https=https,
            console_listen=console_listen,
            console_namesrv=ns.address,
            controller=controller,
        )
    )


def _announce_tier(broker: Any) -> None:
    where = broker.store_config.tiered_dir
    if where:
        _announce(f"tiered store (sealed commit-log files as Parquet) in {where}")


COMMANDS = [namesrv_cmd, broker_cmd, serve_cmd]

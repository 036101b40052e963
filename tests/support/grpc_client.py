"""The official RocketMQ 5.x Python client (rocketmq-python-client) for the interop tests: a
virtualenv of its own, made once and cached, and one scenario of ``grpc_interop_client.py`` run
in it against a broker's gRPC front end."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .grpc_broker import BrokerThread
from .interop import cache_dir

CLIENT_SPEC = "rocketmq-python-client==5.1.2"
INSTALL_TIMEOUT_S = 420
RUN_TIMEOUT_S = 60


def client_venv() -> Path:
    """The python of a venv with the client installed; made on first use (under a file lock,
    so parallel test runs do not build it twice)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / CLIENT_SPEC.replace("==", "-")
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)],
                check=True,
                capture_output=True,
                timeout=RUN_TIMEOUT_S,
            )
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    CLIENT_SPEC,
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
            )
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(venv, ignore_errors=True)
            tail = (exc.stderr or "")[-500:] if isinstance(exc.stderr, str) else ""
            pytest.skip(f"cannot install {CLIENT_SPEC}: {tail}")
        except subprocess.TimeoutExpired:
            shutil.rmtree(venv, ignore_errors=True)
            pytest.skip(f"installing {CLIENT_SPEC} took over {INSTALL_TIMEOUT_S} s")
        marker.write_text(CLIENT_SPEC + "\n")
        return python


SCRIPT = Path(__file__).resolve().parent / "grpc_interop_client.py"


@pytest.fixture(scope="module")
def client_python() -> Path:
    """The official 5.x client's interpreter (its virtualenv made on first use)."""
    return client_venv()


def run_client(
    python: Path,
    broker: BrokerThread | None,
    home: Path,
    *,
    roots: Path | None = None,
    **args: Any,
) -> dict[str, Any]:
    """Run one scenario with the official client; its JSON result. ``roots``: the CA file the
    client's TLS trusts; ``broker`` gives the endpoint when ``endpoints`` does not."""
    if "endpoints" not in args:
        assert broker is not None
        args["endpoints"] = broker.grpc_address
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["HOME"] = str(home)  # the client writes its log under ~/logs/rocketmq_python
    if roots is not None:
        env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(roots)
    log = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
    try:
        r = subprocess.run(
            [str(python), str(SCRIPT), json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        tail = log.read_text()[-3000:] if log.exists() else ""
        pytest.fail(f"{args['scenario']} took over {RUN_TIMEOUT_S} s; client log:\n{tail}")
    if r.returncode != 0 or not r.stdout.strip():
        tail = log.read_text()[-3000:] if log.exists() else ""
        pytest.fail(f"{args['scenario']} failed ({r.returncode}):\n{r.stderr[-3000:]}\n{tail}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result

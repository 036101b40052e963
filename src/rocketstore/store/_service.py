"""The one base class of every background loop: start, stop with a join timeout, wake-up."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class ServiceThread:
    """A daemon thread running ``run()`` until ``stop()``.

    ``run()`` loops on ``while not self.stopped:`` and waits with ``wait_for_running(seconds)``,
    which returns early on ``wakeup()`` or ``stop()``.
    """

    join_timeout = 90.0

    def __init__(self, name: str | None = None) -> None:
        self.name = name or type(self).__name__
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._notified = threading.Event()
        self.error: BaseException | None = None
        self.join_timed_out = False  # the last stop() gave up waiting for the thread

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopped.clear()
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # a service must not die silently
            self.error = exc
            log.exception("%s stopped by an error", self.name)

    def run(self) -> None:
        raise NotImplementedError

    def wakeup(self) -> None:
        """Wake the service; nothing to do when a wake-up is pending already (the service
        clears it when it wakes, before it works: what the caller did before is covered), as
        RocketMQ's ``hasNotified.compareAndSet(false, true)`` skips it."""
        notified = self._notified
        if not notified.is_set():
            notified.set()

    def wait_for_running(self, seconds: float) -> None:
        """Sleep up to ``seconds``; returns early when woken or stopped."""
        if self._notified.is_set():
            self._notified.clear()
            self.on_wait_end()
            return
        self._notified.wait(seconds)
        self._notified.clear()
        self.on_wait_end()

    def on_wait_end(self) -> None:
        """Hook run after every wait (group commit swaps its request lists here)."""

    def stop(self, join: bool = True) -> None:
        self._stopped.set()
        self._notified.set()
        if join and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)
            self.join_timed_out = self._thread.is_alive()
            if self.join_timed_out:
                log.warning("%s did not stop within %.0f s", self.name, self.join_timeout)
        self._thread = None

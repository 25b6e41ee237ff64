"""Progress of a running check in `glmgate run`, `gate` and `zoo` (gate/cli.py `_run_checks`).

With a terminal a bar advances per example. Without one (CI logs) a line is printed per finished example
once the check has run longer than `quiet_s`, and a heartbeat line while one example runs longer than
`heartbeat_s` with nothing printed: on a cold GPU a check's first example compiles every kernel it reaches
(serving.state_machine: ~140 s on an H200), which used to be minutes of silence in a log.
"""
from __future__ import annotations

import threading
import time


class Ticker:
    """`on_example` of one check (engine.run_check calls it after each example); a context manager that
    runs the heartbeat without a terminal."""

    def __init__(self, prog, task, console, name: str, per: int, quiet_s: float = 10.0,
                 heartbeat_s: float = 30.0):
        self.prog, self.task, self.console, self.name, self.per = prog, task, console, name, per
        self.quiet_s, self.heartbeat_s = quiet_s, heartbeat_s
        self.n = 0
        self.t0 = self.last = time.time()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None

    def __call__(self) -> None:
        self.prog.advance(self.task)
        with self._lock:
            self.n += 1
            now = self.last = time.time()           # an example finished: the heartbeat counts from here
            if not self.console.is_terminal and now - self.t0 > self.quiet_s:
                self._say(f"example {self.n}/{self.per} ({now - self.t0:.0f}s)")

    def _say(self, what: str) -> None:
        self.last = time.time()
        self.console.print(f"    {self.name}: {what}", style="dim")

    def _beat(self) -> None:
        while not self._stop.wait(min(self.heartbeat_s, 5.0)):
            with self._lock:
                now = time.time()
                if now - self.last >= self.heartbeat_s:
                    self._say(f"example {self.n + 1}/{self.per} still running ({now - self.t0:.0f}s)")

    def __enter__(self) -> "Ticker":
        if not self.console.is_terminal:
            self._thread = threading.Thread(target=self._beat, name=f"glmgate-heartbeat-{self.name}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

"""A worker process that runs test cases so that a crash is a failed case, not a lost run.

The worker is started with ``spawn`` (safe with CUDA and threads in the parent), imports once,
and answers one case at a time over a pipe. A case that kills it (a segfault, an abort) comes
back as ``{"kind": "crash"}`` and one that outlives ``timeout`` as ``{"kind": "hang"}``; the
worker is then started again for the next case."""

from __future__ import annotations

import multiprocessing
import os
import sys


def _serve(conn, root):
    sys.path.insert(0, root)
    from tests.reliability import hostile_cases
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(hostile_cases.run(*job))


class Isolated:
    """``run(*job)``: ``hostile_cases.run(*job)`` in the worker, or a crash/hang record."""

    def __init__(self, timeout=120.0):
        self.timeout = timeout
        self._ctx = multiprocessing.get_context("spawn")
        self._proc = self._conn = None

    def _start(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self._conn, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child, root), daemon=True)
        self._proc.start()
        child.close()

    def run(self, *job):
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send(job)
        if self._conn.poll(self.timeout):
            try:
                return self._conn.recv()
            except EOFError:
                pass
        else:
            self._proc.kill()
        self._proc.join(5)
        kind = "hang" if self._proc.exitcode is None or self._proc.exitcode == -9 else "crash"
        record = {"kind": kind, "exitcode": self._proc.exitcode, "warnings": []}
        self._proc = None
        return record

    def close(self):
        if self._proc is not None and self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(10)
        self._proc = None

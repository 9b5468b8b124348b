"""Running one test body on many threads at once."""

import threading


def run_in_threads(worker, count):
    """Start ``worker(i)`` for ``i`` in ``range(count)`` on ``count`` threads, join them all."""
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

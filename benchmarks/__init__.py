"""gpulinalg's benchmarks: ``python -m benchmarks NAME [ARGS ...]`` (names in ``__main__``).

``suites/`` holds the published suites (their rows are the pages under ``docs/benchmarks/``) and
the modules they take rows or measurements from, ``studies/`` the one-off investigations,
``_harness.py`` what both share (peers, timing, rows, JSON, environment); ``report.py`` and
``compare.py`` read result files (``results/``). Suites import the harness and each other,
studies import the harness and suites; the harness imports neither.
"""

"""Every Python snippet of the README and the user docs runs: a page's blocks in order in one
fresh interpreter (a later block may use an earlier one's names), after the page's setup below
(the data a snippet calls ``X``, ``a``, ``A``...: placeholders for the reader's own). The
blocks that cannot run here are listed with the reason (a cluster's sizes, an API that no
longer exists, shown as what migrates); those written for a CUDA device run where torch sees
one."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", "docs/coming_from.md", "docs/dask.md", "docs/decomp.md", "docs/dense.md",
         "docs/gp.md", "docs/runtime.md", "docs/sparse.md", "docs/migration/decomp.md"]

_SPD = ("import numpy as np\n"
        "_g = np.random.default_rng(0).standard_normal((40, 40))\n"
        "a = _g @ _g.T + 40 * np.eye(40)\n")
#: Names a page's snippets take as given: set before its first block (key ``page``) or before
#: one block (key ``(page, index)``).
SETUP = {
    "docs/decomp.md": ("import numpy as np\n"
                       "X = np.random.default_rng(0).standard_normal((300, 12))\n"),
    "docs/gp.md": ("import numpy as np\n_r = np.random.default_rng(0)\n"
                   "X, X_new = _r.uniform(0, 1, (40, 2)), _r.uniform(0, 1, (5, 2))\n"
                   "y = np.sin(6 * X[:, 0]) + 0.1 * _r.standard_normal(40)\n"),
    "docs/runtime.md": "import gpulinalg\n" + _SPD,
    ("docs/sparse.md", 1): ("import scipy.sparse as sp\n"
                            "B_sparse = sp.random(A.shape[0], 3, density=1e-5, format='csr',"
                            " random_state=0)\nL = sp.tril(A, format='csr')\n"),
    "docs/migration/decomp.md": (_SPD + "from gpulinalg import decomp\n"
                                 "t = np.tril(a)\nb = np.ones(40)\n"),
}
#: ``(page, block index)``: why it does not run here.
SKIP = {
    ("docs/dask.md", 0): "a cluster's sizes (a 200 000 x 20 000 array: 32 GB)",
    ("docs/migration/decomp.md", 0): "the API before the change the page describes",
    ("docs/migration/decomp.md", 2): "the API before the change the page describes",
    ("docs/migration/decomp.md", 4): "the API before the change the page describes",
}


def _cuda():
    """Whether the blocks written for a CUDA device can run (torch sees one)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _blocks(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


@pytest.mark.parametrize("page", PAGES)
def test_page_snippets_run(page, tmp_path):
    blocks = _blocks(page)
    assert blocks, f"{page} has no python block: update PAGES"
    run = [SETUP.get((page, i), "") + b for i, b in enumerate(blocks)
           if (page, i) not in SKIP and ("cuda" not in b or _cuda())]
    code = SETUP.get(page, "") + "\n".join(run)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_page_with_python_blocks_is_listed():
    import glob
    found = {os.path.relpath(p, ROOT) for pattern in ("README.md", "docs/*.md", "docs/*/*.md")
             for p in glob.glob(os.path.join(ROOT, pattern))
             if "performance-log" not in p and "benchmarks" not in p and _blocks(p)}
    assert found <= set(PAGES), sorted(found - set(PAGES))

"""A missing optional dependency is named with the extra that installs it (each check in a
fresh interpreter with the dependency blocked: None in ``sys.modules``)."""

import subprocess
import sys

import pytest


def _run(code):
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gp_regressor_without_sklearn():
    _run("import sys; sys.modules['sklearn'] = None\n"
         "import gpulinalg.gp\n"
         "try:\n    gpulinalg.gp.GaussianProcessRegressor\nexcept ImportError as e:\n"
         "    assert \"pip install 'gpulinalg[sklearn]'\" in str(e), e\n"
         "else:\n    raise SystemExit('no ImportError')\n")


def test_local_cluster_without_distributed():
    pytest.importorskip("dask")
    _run("import sys; sys.modules['distributed'] = None\n"
         "from gpulinalg import distributed\n"
         "try:\n    distributed.local_cluster(gpu=False)\nexcept ImportError as e:\n"
         "    assert \"pip install 'gpulinalg[dask]'\" in str(e), e\n"
         "else:\n    raise SystemExit('no ImportError')\n")


def test_dense_without_torch_still_imports():
    """A blocked torch leaves gpulinalg working for NumPy, and FusedLinear says what it needs."""
    _run("import sys; sys.modules['torch'] = None\n"
         "import numpy as np\n"
         "from gpulinalg import dense, decomp\n"
         "assert np.allclose(decomp.solve(np.eye(2) * 2, np.ones(2)), 0.5)\n"
         "try:\n    dense.FusedLinear\nexcept ImportError as e:\n"
         "    assert 'needs torch' in str(e), e\nelse:\n    raise SystemExit('no ImportError')\n")

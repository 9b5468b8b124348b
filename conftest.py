"""Collection rules for the whole tree: the tests under tests/ and the doctests of gpulinalg/."""

import importlib.metadata

collect_ignore_glob = []
try:
    importlib.metadata.version("torch")
except importlib.metadata.PackageNotFoundError:
    # torch is optional: the torch layer's module imports it at the top, so its doctests are
    # not collected without it (the torch tests under tests/ skip with a reason).
    collect_ignore_glob.append("gpulinalg/*/*_torch.py")

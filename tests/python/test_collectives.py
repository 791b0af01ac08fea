"""test_collectives.py — proves shoal.Comm's collectives against numpy's own results on 1 to
4 ranks under `shoal launch` (each dtype and op, in place and into out, started and waited,
mixed sizes; ranks/collectives.py holds the checks), and that the module is the one `make`
built into the build tree."""
import os

import pytest

import shoal
from conftest import ROOT, launch


def test_the_module_is_built_into_the_build_tree():
    mod = os.path.realpath(shoal._shoal.__file__)
    build = os.path.realpath(os.path.join(os.environ.get("SHOAL_BIN", os.path.join(ROOT, "build", "shoal")),
                                          os.pardir, "python"))
    assert mod.startswith(build + os.sep), "shoal._shoal comes from %s, not %s" % (mod, build)
    assert shoal.DTYPES == ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_collectives_equal_numpys_results(n):
    rc, out = launch(n, "collectives.py", timeout=180)
    assert rc == 0, out
    for r in range(n):
        assert "rank %d: " % r in out and "rank %d: 0 checks" % r not in out, out
    assert out.count(" 0 failed") == n, out

"""python.install (CTest): the installed package imports from the install
prefix and its extension loads the installed libqc (the $ORIGIN RPATH), not
the build tree's. Usage: check_install.py PREFIX (PYTHONPATH set to the
package's install directory)."""

import os
import sys


def main() -> int:
    prefix = os.path.realpath(sys.argv[1])
    import numpy as np

    import qc

    where = os.path.realpath(qc.__file__)
    if not where.startswith(prefix + os.sep):
        print(f"check_install: qc imported from {where}, not from {prefix}", file=sys.stderr)
        return 1
    out = qc.emulate_allreduce([np.ones(1000, np.float32)] * 2, qc.Policy(codec="minmax", min_compress_bytes=0))
    assert np.allclose(out[0], 2.0)
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "libqc.so" in line}
    bad = [lib for lib in libs if not os.path.realpath(lib).startswith(prefix + os.sep)]
    if not libs or bad:
        print(f"check_install: libqc loaded from {sorted(libs)}, expected under {prefix}", file=sys.stderr)
        return 1
    print(f"qc {qc.__version__} from {where}; libqc {sorted(libs)[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

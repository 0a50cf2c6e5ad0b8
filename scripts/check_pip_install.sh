#!/usr/bin/env bash
# The Python package as pip builds it (pyproject.toml): `pip install .` into a
# fresh venv, then `pip wheel .` and that wheel into a second fresh venv. Each
# install must import and work from the venv alone: run under `env -i` (no
# LD_LIBRARY_PATH, no PYTHONPATH) from outside the repository, it checks
# qc.__version__ against include/qc.h, runs an allreduce over two local ranks,
# and checks the package directory (extension RUNPATH $ORIGIN, libqc as one
# real file). Needs network access to PyPI (scikit-build-core, pybind11, numpy).
#
#   scripts/check_pip_install.sh [-D NAME=VALUE]... [WORKDIR]
#
# -D passes a CMake cache entry to both builds (pip --config-settings
# cmake.define.NAME=VALUE), e.g. -D QC_WITH_CUDA=OFF. WORKDIR holds the venvs
# and the wheel and is kept; without it a temporary directory is used and
# removed at exit.
#
# The builds share scikit-build-core's build directory build/pip/<wheel tag>
# (pyproject.toml), so the second reuses libqc's objects (the extension is
# compiled again: pip's isolated build environment moves pybind11's headers
# each run). Environment: QC_PIP_PYTHON, the interpreter the venvs are made
# from (default /usr/bin/python3); CMAKE_BUILD_PARALLEL_LEVEL, build jobs
# (default 2); QC_PIP_PREINSTALL, requirements pip installs into the first
# venv before qc (e.g. "torch pytest": then `import qc.torch` must work and
# register the torch.distributed backend "qc"). Exit status 0 when all
# checks pass.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${QC_PIP_PYTHON:-/usr/bin/python3}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
pip_settings=()
while [[ $# -gt 0 && $1 == -D* ]]; do
  define=${1#-D}
  shift
  if [[ -z $define ]]; then
    define=${1:-}
    shift || true
  fi
  if [[ ! $define =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]]; then
    echo "check_pip_install: -D needs NAME=VALUE, got '$define'" >&2
    exit 2
  fi
  pip_settings+=("--config-settings=cmake.define.$define")
done
if [[ $# -gt 1 ]]; then
  echo "usage: scripts/check_pip_install.sh [-D NAME=VALUE]... [WORKDIR]" >&2
  exit 2
fi
if [[ $# -gt 0 ]]; then
  work=$1
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
work=$(cd "$work" && pwd)

version=$(sed -nE 's/^#define QC_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+).*/\2/p' "$root/include/qc.h" |
          paste -sd. -)
if [[ ! $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "check_pip_install: cannot read the version from include/qc.h (got '$version')" >&2
  exit 1
fi
echo "check_pip_install: qc $version, venvs from $python, work directory $work${pip_settings[*]:+, ${pip_settings[*]}}"

stage_start=$SECONDS
stage() {
  printf '  [%4ds] %s\n' "$((SECONDS - stage_start))" "$*"
  stage_start=$SECONDS
}

# check_venv VENV: the installed package, run with no environment at all but
# PATH, from the work directory (not the repository, whose bindings/python
# must not be what is imported).
check_venv() {
  (cd "$work" && env -i PATH=/usr/bin:/bin "$1/bin/python" - "$version" "$1" <<'PY'
import os, sys, threading

import numpy as np
import qc

version, venv = sys.argv[1], os.path.realpath(sys.argv[2])
pkg = os.path.dirname(os.path.realpath(qc.__file__))
problems = []
if not pkg.startswith(venv + os.sep):
    problems.append(f"qc imported from {pkg}, not from the venv {venv}")
if qc.__version__ != version:
    problems.append(f"qc.__version__ {qc.__version__!r} != include/qc.h's {version!r}")
if qc.library_version() != version:
    problems.append(f"loaded libqc is {qc.library_version()!r}, not {version!r}")

# The package directory: the extension and libqc as regular files (a wheel
# holds no symlinks), the extension's DT_NEEDED libqc found through $ORIGIN.
names = sorted(os.listdir(pkg))
links = [n for n in names if os.path.islink(os.path.join(pkg, n))]
if links:
    problems.append(f"symlinks in {pkg}: {links}")
if not any(n.startswith("libqc.so.") for n in names):
    problems.append(f"no libqc.so.* in {pkg}: {names}")

# A real collective: two ranks on two threads, float32 sum, exact.
comms = qc.Comm.local(2)
data = [np.full(1000, r + 1, np.float32) for r in range(2)]
def rank(c):
    c.allreduce(data[c.rank], out=data[c.rank], op="sum")
threads = [threading.Thread(target=rank, args=(c,)) for c in comms]
for t in threads:
    t.start()
for t in threads:
    t.join()
for c in comms:
    c.close()
for r in range(2):
    if not np.array_equal(data[r], np.full(1000, 3, np.float32)):
        problems.append(f"allreduce: rank {r} got {data[r][:4]}..., expected 3.0")

# qc.torch needs torch: without it, importing it raises ModuleNotFoundError
# for torch, nothing else; with torch >= 2 it registers the backend "qc".
try:
    import qc.torch  # noqa: F401
    import torch
    import torch.distributed as dist
    torch_note = f"qc.torch imports (torch {torch.__version__})"
    if int(torch.__version__.split(".")[0]) >= 2:
        if "qc" not in dist.Backend.backend_list:
            problems.append(f"import qc.torch did not register the backend 'qc': {dist.Backend.backend_list}")
        else:
            torch_note += ", backend 'qc' registered"
except ModuleNotFoundError as e:
    if e.name != "torch":
        problems.append(f"import qc.torch: {e!r}")
    torch_note = "qc.torch: torch is not installed here (ModuleNotFoundError)"

if problems:
    print("\n".join("  FAIL " + p for p in problems))
    sys.exit(1)
print(f"  ok: qc {qc.__version__} from {pkg} ({', '.join(names)}); allreduce ok; {torch_note}")
PY
  )
}

# check_elf VENV: RUNPATH and DT_NEEDED of the installed extension.
check_elf() {
  local pkg ext
  pkg=$(echo "$1"/lib/python3*/site-packages/qc)
  ext=$(echo "$pkg"/_qc*.so)
  if [[ ! -f $ext ]]; then
    echo "  FAIL no extension _qc*.so in $pkg" >&2
    return 1
  fi
  local dyn
  dyn=$(readelf -d "$ext")
  if ! grep -q 'R*PATH.*\[\$ORIGIN\]' <<<"$dyn"; then
    echo "  FAIL $ext: RUNPATH is not \$ORIGIN:" >&2
    grep -E 'RPATH|RUNPATH' <<<"$dyn" >&2 || true
    return 1
  fi
  local needed
  needed=$(sed -nE 's/.*NEEDED.*\[(libqc\.so[^]]*)\].*/\1/p' <<<"$dyn")
  if [[ -z $needed || ! -f $pkg/$needed ]]; then
    echo "  FAIL $ext needs '${needed}', which is not a file in $pkg" >&2
    return 1
  fi
  echo "  ok: $(basename "$ext") needs $needed (in qc/), RUNPATH \$ORIGIN"
}

# 1. pip install . into a fresh venv.
rm -rf "$work/venv-install" "$work/venv-wheel" "$work/wheels"
"$python" -m venv "$work/venv-install"
stage "venv $work/venv-install"
if [[ -n ${QC_PIP_PREINSTALL:-} ]]; then
  # shellcheck disable=SC2086 # a list of requirements
  "$work/venv-install/bin/pip" install --disable-pip-version-check -q $QC_PIP_PREINSTALL
  stage "pip install $QC_PIP_PREINSTALL"
fi
"$work/venv-install/bin/pip" install --disable-pip-version-check -q ${pip_settings[@]+"${pip_settings[@]}"} "$root"
stage "pip install . (builds libqc and qc._qc in build/pip)"
check_elf "$work/venv-install"
check_venv "$work/venv-install"
stage "checked the installed package"

# 2. pip wheel . (incremental), that wheel into a second fresh venv.
"$python" -m venv "$work/venv-wheel"
"$work/venv-wheel/bin/pip" wheel --disable-pip-version-check -q --no-deps ${pip_settings[@]+"${pip_settings[@]}"} -w "$work/wheels" "$root"
stage "pip wheel . (libqc reused)"
wheel=$(echo "$work"/wheels/qc_collectives-"$version"-*.whl)
if [[ ! -f $wheel ]]; then
  echo "  FAIL no wheel qc_collectives-$version-*.whl in $work/wheels: $(ls "$work/wheels")" >&2
  exit 1
fi
"$work/venv-wheel/bin/python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = sorted({n.split("/")[0] for n in names})
need = ["qc/__init__.py", "qc/torch.py", "qc/py.typed"]
bad = [n for n in need if n not in names]
if not any(n.startswith("qc/_qc") and n.endswith(".so") for n in names):
    bad.append("qc/_qc*.so")
if not any(n.startswith("qc/libqc.so.") for n in names):
    bad.append("qc/libqc.so.*")
extra = [t for t in tops if t != "qc" and not t.endswith(".dist-info")]
if bad or extra:
    print(f"  FAIL wheel {sys.argv[1]}: missing {bad}, unexpected top-level {extra}")
    sys.exit(1)
print(f"  ok: wheel holds {len(names)} files under {tops}")
PY
"$work/venv-wheel/bin/pip" install --disable-pip-version-check -q "$wheel"
stage "wheel into $work/venv-wheel"
check_elf "$work/venv-wheel"
check_venv "$work/venv-wheel"
stage "checked the package installed from the wheel"
echo "check_pip_install: all checks passed"

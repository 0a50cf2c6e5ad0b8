#!/usr/bin/env bash
# Install what building and testing qc needs on Debian 12 (bookworm).
# Idempotent: packages already installed are left alone, and `apt-get update`
# runs only when something is missing. Works as root, or through sudo.
#
# usage: bash scripts/install-deps.sh [--check]
#   --check      only report what is missing (exit 1 if anything is)
#   (--with-mpi is accepted and does nothing: MPI is in the default set)
#
# What each package is for:
#   cmake ninja-build gcc g++   configure and build (C99, C++17); libc6-dev for C headers
#   pkgconf                     pkg-config, for the consumer test
#   binutils                    nm, readelf (consumer/abi_exports test)
#   libgtest-dev libgmock-dev   tests/unit (GoogleTest; CMake config GTest::gtest/gmock)
#   libcmocka-dev               tests/abi (cmocka)
#   libcli11-dev nlohmann-json3-dev
#                               the tools' command line (CLI11) and JSON output (tools/common)
#   file                        build/test diagnostics
#   libopenmpi-dev openmpi-bin  the MPI transport and tests/mpi (mpirun)
#   gfortran                    the Fortran module and example
#   python3-dev pybind11-dev python3-pybind11 python3-numpy
#                               the Python package (bindings/python: pybind11 extension, numpy arrays)
#   python3-pytest              its tests
#   python3-mpi4py              qc.Comm.from_mpi and its tests
#   python3-torch python3-sklearn
#                               torch tensors, the DDP comm hook (qc.torch), the digits comparison
#   python3-matplotlib          tools/plot_perf.py (plots of qc-perf's --json)
#   (all for Debian's /usr/bin/python3; the Python tests run with it)
#   swig openjdk-17-jdk-headless junit4 libhamcrest-java
#                               the Java bindings (bindings/java: SWIG + JNI, JUnit 4 tests)
#   python3-venv                the tools venv below
#   abigail-tools               abidw/abidiff: the ABI guard (tests/abi_guard)
#   clang-14 libclang-rt-14-dev libFuzzer targets (tests/fuzz, QC_BUILD_FUZZERS)
#   python3-clang-14 libclang1-14
#                               libclang's Python bindings: tools/gen_bindings.py reads
#                               qc.h with them (bindings.generated, bindings.gen_tool)
# and, from PyPI (Debian has no tree-sitter-julia), a venv with pinned
# tree-sitter + tree-sitter-julia for the Julia parse check (julia.parse):
#   ${QC_TOOLS_VENV:-/opt/qc-tools-venv}
set -euo pipefail

packages=(cmake ninja-build gcc g++ libc6-dev pkgconf binutils libgtest-dev libgmock-dev libcmocka-dev file
          libcli11-dev nlohmann-json3-dev
          libopenmpi-dev openmpi-bin gfortran
          python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-mpi4py
          python3-torch python3-sklearn python3-matplotlib
          swig openjdk-17-jdk-headless junit4 libhamcrest-java python3-venv
          abigail-tools clang-14 libclang-rt-14-dev python3-clang-14 libclang1-14)
tools_venv=${QC_TOOLS_VENV:-/opt/qc-tools-venv}
tools_pip=(tree-sitter==0.26.1 tree-sitter-julia==0.23.1)
check_only=0

for arg in "$@"; do
  case $arg in
    --with-mpi) ;;  # MPI is part of the default set now; kept for old scripts
    --check) check_only=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d'
      exit 0
      ;;
    *)
      echo "install-deps.sh: unknown argument '$arg'" >&2
      exit 2
      ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps.sh: this script needs a Debian-like system (dpkg, apt-get)." >&2
  echo "install-deps.sh: install by hand: ${packages[*]}" >&2
  exit 1
fi

is_installed() {
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true) == installed ]]
}

missing=()
for p in "${packages[@]}"; do
  is_installed "$p" || missing+=("$p")
done

tools_venv_ok() {
  [[ -x $tools_venv/bin/python ]] && "$tools_venv/bin/python" -c 'import tree_sitter, tree_sitter_julia' 2>/dev/null
}

if [[ ${#missing[@]} -eq 0 ]] && tools_venv_ok; then
  echo "install-deps.sh: all dependencies present (${packages[*]}; $tools_venv: ${tools_pip[*]})"
  exit 0
fi

[[ ${#missing[@]} -eq 0 ]] || echo "install-deps.sh: missing: ${missing[*]}"
tools_venv_ok || echo "install-deps.sh: missing: venv $tools_venv with ${tools_pip[*]}"
if [[ $check_only -eq 1 ]]; then
  exit 1
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps.sh: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2
  exit 1
fi

if [[ ${#missing[@]} -gt 0 ]]; then
  export DEBIAN_FRONTEND=noninteractive
  # sudo drops the environment by default; pass the variable explicitly.
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
  echo "install-deps.sh: installed ${missing[*]}"
fi

if ! tools_venv_ok; then
  # Debian's own interpreter, so the venv does not depend on pyenv or the like.
  "${as_root[@]}" /usr/bin/python3 -m venv "$tools_venv"
  "${as_root[@]}" "$tools_venv/bin/pip" install -q --disable-pip-version-check "${tools_pip[@]}" </dev/null
  tools_venv_ok
  echo "install-deps.sh: venv $tools_venv with ${tools_pip[*]}"
fi

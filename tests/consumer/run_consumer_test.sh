#!/usr/bin/env bash
# Install qc into a private prefix and build examples/hello.c against the
# installed copy, as a user of the library would: with pkg-config and with
# CMake's find_package. Nothing here needs root or touches the system.
#
# usage: run_consumer_test.sh MODE BUILD_DIR SOURCE_DIR PROJECT_VERSION C_COMPILER CMAKE GENERATOR [CONFIG]
#   MODE     install       cmake --install BUILD_DIR into a fresh prefix
#            pkgconfig     pkg-config checks, compile hello.c with cc, run it
#            find_package  configure tests/consumer/find_package against the prefix, build, run
#            fortran       compile examples/fortran_emulate.f90 against the installed
#                          module and libqc_fortran with \$QC_CONSUMER_FC, run it
#            tools         every tool in \$QC_CONSUMER_TOOLS is in the prefix's bin/,
#                          has a RUNPATH into the prefix (not the build tree) and
#                          runs `--version` with no environment at all
#            all           install, pkgconfig, find_package in order (for use without ctest)
#   CONFIG   build configuration for multi-config generators (optional)
#
# Environment (optional):
#   QC_CONSUMER_WORK      work directory (default BUILD_DIR/tests/consumer/work)
#   QC_CONSUMER_CFLAGS    extra compile flags for the consumers (e.g. sanitizers
#   QC_CONSUMER_LDFLAGS   and link flags, so a sanitized libqc can be loaded)
#   QC_CONSUMER_FC        the Fortran compiler (mode fortran)
#   QC_CONSUMER_TOOLS     the tools the build made, space separated (mode tools)
set -euo pipefail

if [[ $# -lt 7 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
fi

mode=$1
build_dir=$(cd "$2" && pwd)
source_dir=$(cd "$3" && pwd)
version=$4
cc=$5
cmake=$6
generator=$7
config=${8:-}

work=${QC_CONSUMER_WORK:-$build_dir/tests/consumer/work}
prefix=$work/prefix
extra_cflags=${QC_CONSUMER_CFLAGS:-}
extra_ldflags=${QC_CONSUMER_LDFLAGS:-}
hello_src=$source_dir/examples/hello.c

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

# major.minor of the project version, e.g. 1.0 of 1.0.0
version_mm=$(echo "$version" | cut -d. -f1-2)

# The library directory of the prefix: GNUInstallDirs may have chosen lib,
# lib64 or lib/<multiarch>; the pkg-config file sits next to the library.
find_libdir() {
  local pc
  pc=$(find "$prefix" -path '*/pkgconfig/qc.pc' -print -quit 2>/dev/null || true)
  [[ -n $pc ]] || fail "no pkgconfig/qc.pc under $prefix (did the install step run?)"
  dirname "$(dirname "$pc")"
}

require_prefix() {
  [[ -f $prefix/.qc-install-complete ]] ||
    fail "$prefix is not a complete install; run the 'install' mode first (ctest runs it as consumer_install)"
}

# The consumer must load libqc from the prefix, not from the build tree.
check_loads_installed_lib() {
  local exe=$1 libdir=$2 resolved
  resolved=$(ldd "$exe" | awk '$1 ~ /^libqc\.so/ {print $3}')
  [[ -n $resolved ]] || fail "$exe does not link libqc: $(ldd "$exe")"
  [[ $(readlink -f "$resolved") == $(readlink -f "$libdir")/* ]] ||
    fail "$exe loads $resolved, not the installed library under $libdir"
  echo "$exe loads $resolved"
}

do_install() {
  step "install $build_dir into $prefix"
  rm -rf "$prefix"
  mkdir -p "$work"
  local args=(--install "$build_dir" --prefix "$prefix")
  [[ -n $config ]] && args+=(--config "$config")
  "$cmake" "${args[@]}"

  local libdir
  libdir=$(find_libdir)
  [[ -f $prefix/include/qc.h ]] || fail "include/qc.h was not installed"
  [[ -f $libdir/cmake/qc/qcConfig.cmake ]] || fail "qcConfig.cmake was not installed in $libdir/cmake/qc"
  [[ -f $libdir/cmake/qc/qcConfigVersion.cmake ]] || fail "qcConfigVersion.cmake was not installed"
  # libqc.so -> libqc.so.<soversion> -> libqc.so.<full version>
  [[ -L $libdir/libqc.so ]] || fail "$libdir/libqc.so is not a symlink (dev link missing)"
  [[ -f $libdir/libqc.so.$version && ! -L $libdir/libqc.so.$version ]] ||
    fail "$libdir/libqc.so.$version (the real file) is missing"
  local soname
  soname=$(readelf -d "$libdir/libqc.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
  [[ -n $soname && -L $libdir/$soname ]] || fail "no symlink $libdir/$soname for SONAME '$soname'"
  # An installed library must not point back into the build tree.
  if readelf -d "$libdir/libqc.so.$version" | grep -E '\((RPATH|RUNPATH)\)' | grep -qF "$build_dir"; then
    fail "installed libqc has an RPATH/RUNPATH into the build tree"
  fi
  ls -l "$libdir"/libqc.so*
  touch "$prefix/.qc-install-complete"
}

do_pkgconfig() {
  require_prefix
  local libdir pcdir out
  libdir=$(find_libdir)
  pcdir=$libdir/pkgconfig
  out=$work/pkgconfig
  rm -rf "$out"
  mkdir -p "$out"
  # Only our prefix: a qc.pc elsewhere on the system must not be found.
  export PKG_CONFIG_PATH=$pcdir
  export PKG_CONFIG_LIBDIR=$pcdir

  step "pkg-config --validate qc"
  pkg-config --validate qc || fail "pkg-config --validate qc"

  step "pkg-config --modversion qc"
  local modversion
  modversion=$(pkg-config --modversion qc)
  [[ $modversion == "$version" ]] || fail "pkg-config --modversion qc is '$modversion', expected '$version'"
  pkg-config --exists "qc >= $version_mm" || fail "pkg-config --exists 'qc >= $version_mm'"

  step "pkg-config paths resolve into the prefix"
  local pc_libdir pc_includedir
  pc_libdir=$(pkg-config --variable=libdir qc)
  pc_includedir=$(pkg-config --variable=includedir qc)
  [[ $(readlink -f "$pc_libdir") == $(readlink -f "$libdir") ]] ||
    fail "libdir in qc.pc is $pc_libdir, expected $libdir"
  [[ -f $pc_includedir/qc.h ]] || fail "includedir in qc.pc ($pc_includedir) has no qc.h"

  step "compile hello.c with $cc and pkg-config flags"
  local cflags libs
  cflags=$(pkg-config --cflags qc)
  libs=$(pkg-config --libs qc)
  echo "cflags: $cflags"
  echo "libs:   $libs"
  # Word splitting of the pkg-config output is intended.
  # shellcheck disable=SC2086
  "$cc" -std=c99 -Wall -Wextra -pedantic -Werror $extra_cflags $cflags \
    "$hello_src" -o "$out/hello" $libs -pthread -Wl,-rpath,"$libdir" $extra_ldflags

  step "run hello (pkg-config build)"
  check_loads_installed_lib "$out/hello" "$libdir"
  "$out/hello"
}

do_find_package() {
  require_prefix
  local libdir out
  libdir=$(find_libdir)
  out=$work/find_package
  rm -rf "$out"
  mkdir -p "$out"

  step "configure tests/consumer/find_package with CMAKE_PREFIX_PATH=$prefix"
  local args=(-S "$source_dir/tests/consumer/find_package" -B "$out" -G "$generator"
    -DCMAKE_C_COMPILER="$cc"
    -DCMAKE_PREFIX_PATH="$prefix"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
    -DQC_HELLO_SOURCE="$hello_src"
    -DQC_REQUIRED_VERSION="$version_mm"
    -DQC_EXPECTED_VERSION="$version"
    -DQC_EXPECTED_PREFIX="$prefix")
  [[ -n $extra_cflags ]] && args+=(-DCMAKE_C_FLAGS="$extra_cflags")
  [[ -n $extra_ldflags ]] && args+=(-DCMAKE_EXE_LINKER_FLAGS="$extra_ldflags")
  [[ -n $config ]] && args+=(-DCMAKE_BUILD_TYPE="$config")
  "$cmake" "${args[@]}"

  step "build"
  local bargs=(--build "$out")
  [[ -n $config ]] && bargs+=(--config "$config")
  "$cmake" "${bargs[@]}"

  step "run hello (find_package build)"
  local exe
  exe=$(find "$out" -type f -name qc_consumer_hello -perm -u+x -print -quit)
  [[ -n $exe ]] || fail "the consumer executable was not built"
  check_loads_installed_lib "$exe" "$libdir"
  "$exe"
}

do_fortran() {
  require_prefix
  local libdir out moddir fc=${QC_CONSUMER_FC:-}
  [[ -n $fc ]] || fail "mode fortran needs QC_CONSUMER_FC"
  libdir=$(find_libdir)
  moddir=$prefix/include/qc/fortran
  out=$work/fortran
  rm -rf "$out"
  mkdir -p "$out"
  [[ -f $moddir/qc.mod ]] || fail "the Fortran module qc.mod was not installed in $moddir"
  [[ -f $libdir/libqc_fortran.a ]] || fail "libqc_fortran.a was not installed in $libdir"

  local pc_dir fflags flibs
  pc_dir=$(dirname "$(find "$prefix" -path '*/pkgconfig/qc-fortran.pc' -print -quit)")
  [[ -f $pc_dir/qc-fortran.pc ]] || fail "no pkgconfig/qc-fortran.pc under $prefix"
  fflags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags qc-fortran) ||
    fail "pkg-config --cflags qc-fortran failed"
  flibs=$(PKG_CONFIG_PATH=$pc_dir pkg-config --libs qc-fortran) ||
    fail "pkg-config --libs qc-fortran failed"
  local flag found=0
  for flag in $fflags; do
    [[ $flag == -I* && -f ${flag#-I}/qc.mod ]] && found=1
  done
  [[ $found == 1 ]] || fail "qc-fortran.pc's Cflags ($fflags) name no directory with qc.mod"

  step "compile examples/fortran_emulate.f90 with $fc, flags from qc-fortran.pc: $fflags $flibs"
  # shellcheck disable=SC2086
  (cd "$out" && "$fc" $extra_cflags $fflags "$source_dir/examples/fortran_emulate.f90" \
    -o "$out/fortran_emulate" $flibs -Wl,-rpath,"$libdir" $extra_ldflags)

  step "run fortran_emulate (installed module)"
  check_loads_installed_lib "$out/fortran_emulate" "$libdir"
  "$out/fortran_emulate"
}

do_tools() {
  require_prefix
  local tools=${QC_CONSUMER_TOOLS:-} tool exe runpath out
  [[ -n $tools ]] || fail "mode tools needs QC_CONSUMER_TOOLS"
  for tool in $tools; do
    exe=$prefix/bin/$tool
    [[ -x $exe ]] || fail "$tool was not installed in $prefix/bin"
    runpath=$(readelf -d "$exe" | sed -n 's/.*(\(RPATH\|RUNPATH\)).*\[\(.*\)\].*/\2/p')
    [[ $runpath != *"$build_dir"* ]] || fail "$tool has a RUNPATH into the build tree: $runpath"
    step "env -i $exe --version (RUNPATH ${runpath:-none})"
    out=$(cd / && env -i "$exe" --version) || fail "$tool --version failed with no environment set"
    [[ $out == "$tool $version" ]] || fail "$tool --version printed '$out', expected '$tool $version'"
    echo "$out"
  done
}

case $mode in
  install) do_install ;;
  tools) do_tools ;;
  fortran) do_fortran ;;
  pkgconfig) do_pkgconfig ;;
  find_package) do_find_package ;;
  all) do_install; do_pkgconfig; do_find_package ;;
  *) fail "unknown mode '$mode' (install, pkgconfig, find_package, fortran, tools, all)" ;;
esac
echo "PASS: consumer $mode"

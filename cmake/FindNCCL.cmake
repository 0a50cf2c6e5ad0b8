# FindNCCL: NCCL's header and library. NCCL ships no pkg-config file or CMake
# package in the CUDA toolkit layout (/usr/local/cuda/{include,lib64}), so
# this looks there, under NCCL_ROOT (variable or environment) and under the
# CUDA toolkit that find_package(CUDAToolkit) found.
#
# Result: NCCL_FOUND, NCCL_VERSION (from NCCL_MAJOR/MINOR/PATCH in nccl.h),
# NCCL_INCLUDE_DIR, NCCL_LIBRARY and the imported target NCCL::nccl.
set(_qc_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _qc_nccl_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
list(APPEND _qc_nccl_hints /usr/local/cuda)

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_qc_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl HINTS ${_qc_nccl_hints} PATH_SUFFIXES lib64 lib)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _qc_nccl_defs
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part} +([0-9]+)" _m "${_qc_nccl_defs}")
    set(_qc_nccl_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  set(NCCL_VERSION "${_qc_nccl_MAJOR}.${_qc_nccl_MINOR}.${_qc_nccl_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

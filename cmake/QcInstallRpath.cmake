# qc_install_rpath(TARGET INSTALL_DIR): the installed TARGET, which lands in
# INSTALL_DIR (relative to the prefix, or absolute), finds libqc in the
# prefix's library directory through an $ORIGIN-relative RUNPATH, so the
# installed tree runs with no environment set and can be moved as a whole.
# An absolute directory on either side gives the absolute library directory.
function(qc_install_rpath target install_dir)
  if(IS_ABSOLUTE "${install_dir}" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(_rpath "${CMAKE_INSTALL_FULL_LIBDIR}")
  else()
    file(RELATIVE_PATH _to_lib "/qc_prefix/${install_dir}" "/qc_prefix/${CMAKE_INSTALL_LIBDIR}")
    string(REGEX REPLACE "/+$" "" _to_lib "${_to_lib}")
    set(_rpath "$ORIGIN/${_to_lib}")
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${_rpath}")
endfunction()

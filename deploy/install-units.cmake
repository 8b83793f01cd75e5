# Run by `cmake --install` (install(SCRIPT) in deploy/install.cmake): copies
# the systemd units into <prefix>/lib/systemd/system with ExecStart naming
# <prefix>/<bindir>/..., the prefix of this install (CMAKE_INSTALL_PREFIX is
# the install-time one here; DESTDIR is added by file(INSTALL)).
file(GLOB _units "${CTUNE_UNIT_SRC}/*.service")
file(MAKE_DIRECTORY "${CTUNE_UNIT_TMP}")
set(_out "")
foreach(_u ${_units})
  get_filename_component(_name "${_u}" NAME)
  file(READ "${_u}" _text)
  string(REPLACE "/usr/bin/" "${CMAKE_INSTALL_PREFIX}/${CTUNE_BINDIR}/" _text "${_text}")
  file(WRITE "${CTUNE_UNIT_TMP}/${_name}" "${_text}")
  list(APPEND _out "${CTUNE_UNIT_TMP}/${_name}")
endforeach()
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" TYPE FILE
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ FILES ${_out})

# Installed layout (docs/protocol.md#installed-layout): programs in bin/ (their
# own folders' install() rules), the CUDA plugin in lib/ctune/ (kernels/),
# and here: the dashboard in share/ctune/web, examples in share/ctune/examples,
# deployment files in share/ctune/deploy, docs in share/doc/ctune and the
# systemd units in lib/systemd/system. The programs look for share/ctune and
# lib/ctune relative to their own executable (<bin>/..), so the paths below
# are fixed rather than taken from GNUInstallDirs' DATADIR/LIBDIR, which a
# Debian prefix would turn into lib/x86_64-linux-gnu.
set(CTUNE_SHARE share/ctune)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/web/ DESTINATION ${CTUNE_SHARE}/web)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CTUNE_SHARE}/examples
  USE_SOURCE_PERMISSIONS)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/deploy/ DESTINATION ${CTUNE_SHARE}/deploy
  USE_SOURCE_PERMISSIONS
  PATTERN install.cmake EXCLUDE PATTERN install-units.cmake EXCLUDE)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The units name the programs by absolute path (ExecStart=/usr/bin/...): the
# path is rewritten at install time for the prefix actually used (cmake
# --install --prefix, make install PREFIX=..., CPack's /usr), not the one
# the build tree was configured with.
install(CODE "set(CTUNE_UNIT_SRC \"${CMAKE_SOURCE_DIR}/deploy/systemd\")
set(CTUNE_UNIT_TMP \"${CMAKE_BINARY_DIR}/deploy-units\")
set(CTUNE_BINDIR \"${CMAKE_INSTALL_BINDIR}\")")
install(SCRIPT ${CMAKE_SOURCE_DIR}/deploy/install-units.cmake)

# make package: a Debian package of the same layout under /usr.
# CPack (and the build's own `install` target) package what is built, without
# building "all" first: `make install`/`make package` build before, and the
# package test (tests/deploy) must not rebuild the tree under a running ctest.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ctune)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "ctune")
set(CPACK_PACKAGE_CONTACT "ctune maintainers <ctune@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "hyperparameter search service: server, workers, trainer, CLI and dashboard")
# The extended description (the summary above is its first line).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "ctune-server (REST API, SQLite, dashboard), ctune-worker (runs trials on
this machine's CPUs and GPUs), ctune-train (the builtin trainer) and the
ctune command-line client, with systemd units for the server and workers.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/ctune")
# The Debian libraries the programs link (readelf -d: NEEDED), listed by hand
# rather than by dpkg-shlibdeps: the optional CUDA plugin links the CUDA
# toolkit's libraries, which no Debian package provides and which must never
# be a dependency (ctune-train loads the plugin only when a run asks for it).
set(CPACK_DEBIAN_PACKAGE_DEPENDS
  "libc6 (>= 2.34), libmicrohttpd12, libcjson1, libuv1, libsqlite3-0, libcurl4, zlib1g, libopenblas0 | libopenblas0-pthread")
# The dashboard draws its charts with Debian's Chart.js when present.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libjs-chart.js")
include(CPack)

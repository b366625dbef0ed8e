# Install rules: the library, its export set kiln::kiln, a package config with version, and the
# public headers under include/kiln/ (STYLE.md R2). Internal headers never leave the build tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

install(TARGETS kiln
  EXPORT kilnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Public headers keep their path: core/array.h -> include/kiln/core/array.h. Whatever matches an
# EXCLUDE below is internal: built-in primitive classes, *_impl.h, the CPU and Vulkan backends and
# transforms/internal*. Excluding a directory drops everything beneath it.
foreach(dir core nn optim io models)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln
    FILES_MATCHING
      PATTERN "*.h"
      PATTERN "*_primitives.h" EXCLUDE
      PATTERN "*_impl.h" EXCLUDE
      PATTERN "cpu" EXCLUDE
      PATTERN "vulkan" EXCLUDE
      REGEX "/transforms/internal[^/]*$" EXCLUDE)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)

install(EXPORT kilnTargets
  NAMESPACE kiln::
  DESTINATION ${KILN_INSTALL_CMAKEDIR})

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake
  INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# 0.x releases may break the API between minor versions.
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
  DESTINATION ${KILN_INSTALL_CMAKEDIR})

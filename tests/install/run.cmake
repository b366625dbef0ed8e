# Run by ctest as install_find_package (see tests/CMakeLists.txt for the arguments):
#   1. cmake --install the kiln build tree into a fresh prefix,
#   2. check that no internal header was installed (STYLE.md R2),
#   3. configure, build and run the consumer project against that prefix with find_package(kiln).
foreach(var KILN_BUILD_DIR WORK_DIR CONSUMER_SOURCE_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install test: ${var} is not set")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${step} failed (${rc})")
  endif()
endfunction()

set(config_args)
if(BUILD_TYPE)
  set(config_args --config ${BUILD_TYPE})
endif()
run("cmake --install" ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix} ${config_args})

foreach(header include/kiln/kiln.h include/kiln/core/array.h)
  if(NOT EXISTS ${prefix}/${header})
    message(FATAL_ERROR "install test: ${header} was not installed")
  endif()
endforeach()
file(GLOB_RECURSE internal LIST_DIRECTORIES true RELATIVE ${prefix} ${prefix}/include/*)
list(FILTER internal INCLUDE REGEX "(_primitives\\.h|_impl\\.h|/cpu|/vulkan|/transforms/internal[^/]*)$")
if(internal)
  list(JOIN internal "\n  " internal)
  message(FATAL_ERROR "install test: internal headers were installed:\n  ${internal}")
endif()

set(configure_args
  -S ${CONSUMER_SOURCE_DIR} -B ${consumer_build} -G ${GENERATOR}
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
if(BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(COMPILER_LAUNCHER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER}")
endif()
run("configuring the consumer" ${CMAKE_COMMAND} ${configure_args})
# Only the scratch prefix may provide kiln, never a copy installed elsewhere on the system.
file(STRINGS ${consumer_build}/CMakeCache.txt kiln_dir REGEX "^kiln_DIR:")
string(REGEX REPLACE "^kiln_DIR:[A-Z]+=" "" kiln_dir "${kiln_dir}")
cmake_path(IS_PREFIX prefix "${kiln_dir}" NORMALIZE from_prefix)
if(NOT from_prefix)
  message(FATAL_ERROR "install test: find_package(kiln) found ${kiln_dir}, not the copy in ${prefix}")
endif()
run("building the consumer" ${CMAKE_COMMAND} --build ${consumer_build} ${config_args})

find_program(consumer kiln_consumer PATHS ${consumer_build} ${consumer_build}/${BUILD_TYPE} NO_DEFAULT_PATH)
if(NOT consumer)
  message(FATAL_ERROR "install test: the consumer executable was not built")
endif()
run("running the consumer" ${consumer})

# CMake package for cupreempt: find_package(cupreempt) (with -Dcupreempt_DIR=<repo>/cmake, or
# this folder under an install prefix on CMAKE_PREFIX_PATH), then
#
#   cupreempt_enable(TARGET...)
#
# compiles each target's CUDA sources through `cupreempt` as the compiler launcher (each source
# is transformed, with the project headers it includes, into a folder next to its object;
# refused kernels are compiled as written, with a warning, unless CUPREEMPT_STRICT=1 is in the
# environment) and links the target with the runtime library (cupreempt::runtime).
#
# Looks for the `cupreempt` binary in CUPREEMPT_EXECUTABLE, then next to this file's repository
# build (../target/release) or install (../../../bin), then on PATH; the runtime library next to
# the binary or in ../lib from it.
include_guard(GLOBAL)

find_program(CUPREEMPT_EXECUTABLE cupreempt
  HINTS "${CMAKE_CURRENT_LIST_DIR}/../target/release" "${CMAKE_CURRENT_LIST_DIR}/../../../bin"
  DOC "The cupreempt binary")
if(NOT CUPREEMPT_EXECUTABLE)
  set(cupreempt_FOUND FALSE)
  set(cupreempt_NOT_FOUND_MESSAGE
    "cupreempt binary not found: build it (cargo build --release) or set CUPREEMPT_EXECUTABLE")
  return()
endif()
get_filename_component(_cupreempt_bin "${CUPREEMPT_EXECUTABLE}" DIRECTORY)
find_library(CUPREEMPT_RUNTIME_LIBRARY cupreempt_runtime
  HINTS "${_cupreempt_bin}" "${_cupreempt_bin}/../lib" NO_DEFAULT_PATH
  DOC "libcupreempt_runtime")
if(NOT CUPREEMPT_RUNTIME_LIBRARY)
  set(cupreempt_FOUND FALSE)
  set(cupreempt_NOT_FOUND_MESSAGE
    "libcupreempt_runtime not found next to ${CUPREEMPT_EXECUTABLE} or in ../lib: build the workspace (cargo build --release --workspace) or set CUPREEMPT_RUNTIME_LIBRARY")
  return()
endif()

if(NOT TARGET cupreempt::runtime)
  add_library(cupreempt::runtime SHARED IMPORTED)
  set_target_properties(cupreempt::runtime PROPERTIES
    IMPORTED_LOCATION "${CUPREEMPT_RUNTIME_LIBRARY}"
    IMPORTED_NO_SONAME TRUE)
endif()

function(cupreempt_enable)
  foreach(target IN LISTS ARGN)
    if(NOT TARGET ${target})
      message(FATAL_ERROR "cupreempt_enable: ${target} is not a target")
    endif()
    set_property(TARGET ${target} PROPERTY CUDA_COMPILER_LAUNCHER "${CUPREEMPT_EXECUTABLE}")
    target_link_libraries(${target} PRIVATE cupreempt::runtime)
  endforeach()
endfunction()

set(cupreempt_FOUND TRUE)

# nlohmann/json, fmt and GoogleTest: the installed packages, or header-only copies / sources in
# AMPSCOPE_DEPS_DIR for machines without them and without network (a GPU box: see
# tools/gpu_prepare.sh, which fills .gpu-deps/ from this machine, and tools/gpu_check.sh).
#   AMPSCOPE_DEPS_DIR/nlohmann/include/nlohmann/json.hpp
#   AMPSCOPE_DEPS_DIR/fmt/include/fmt/*.h            (used only when torch ships no fmt)
#   AMPSCOPE_DEPS_DIR/googletest/                    (GoogleTest's source tree)
set(AMPSCOPE_DEPS_DIR "" CACHE PATH
  "Folder with nlohmann/fmt header copies and GoogleTest sources (filled by tools/gpu_prepare.sh)")
option(AMPSCOPE_FMT_HEADER_ONLY
  "fmt header-only everywhere (no libfmt): LibTorch's bundled fmt, else AMPSCOPE_DEPS_DIR/fmt" OFF)
option(AMPSCOPE_DEPS_ONLY
  "Take nlohmann_json and GoogleTest from AMPSCOPE_DEPS_DIR even where installed (tests that path)" OFF)

if(NOT AMPSCOPE_DEPS_ONLY)
  find_package(nlohmann_json 3.10 QUIET)
endif()
if(NOT TARGET nlohmann_json::nlohmann_json)
  if(NOT EXISTS "${AMPSCOPE_DEPS_DIR}/nlohmann/include/nlohmann/json.hpp")
    message(FATAL_ERROR "nlohmann_json not found: install nlohmann-json3-dev or set "
      "AMPSCOPE_DEPS_DIR to a folder made by tools/gpu_prepare.sh")
  endif()
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${AMPSCOPE_DEPS_DIR}/nlohmann/include")
  message(STATUS "ampscope: nlohmann_json from ${AMPSCOPE_DEPS_DIR}/nlohmann")
endif()

if(AMPSCOPE_FMT_HEADER_ONLY)
  # Torch targets already compile against LibTorch's bundled fmt (it shadows any other); using
  # the same headers for reports/ keeps one fmt version in the whole build.
  set(_fmt_dir "")
  foreach(dir ${TORCH_INCLUDE_DIRS})
    if(NOT _fmt_dir AND EXISTS "${dir}/fmt/format.h")
      set(_fmt_dir "${dir}")
    endif()
  endforeach()
  if(NOT _fmt_dir AND EXISTS "${AMPSCOPE_DEPS_DIR}/fmt/include/fmt/format.h")
    set(_fmt_dir "${AMPSCOPE_DEPS_DIR}/fmt/include")
  endif()
  if(NOT _fmt_dir)
    message(FATAL_ERROR "AMPSCOPE_FMT_HEADER_ONLY: no fmt headers in torch or AMPSCOPE_DEPS_DIR")
  endif()
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_fmt_dir}"
    INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY)
  message(STATUS "ampscope: fmt header-only from ${_fmt_dir}")
else()
  find_package(fmt REQUIRED)
endif()

# GoogleTest for tests/: the installed package, else built from AMPSCOPE_DEPS_DIR/googletest.
macro(ampscope_find_gtest)
  if(NOT AMPSCOPE_DEPS_ONLY)
    find_package(GTest QUIET)
  endif()
  if(NOT TARGET GTest::gtest_main)
    if(NOT EXISTS "${AMPSCOPE_DEPS_DIR}/googletest/CMakeLists.txt")
      message(FATAL_ERROR "GoogleTest not found: install libgtest-dev or set AMPSCOPE_DEPS_DIR "
        "to a folder made by tools/gpu_prepare.sh")
    endif()
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory("${AMPSCOPE_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
    if(NOT TARGET GTest::gtest_main)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
    endif()
    message(STATUS "ampscope: GoogleTest built from ${AMPSCOPE_DEPS_DIR}/googletest")
  endif()
endmacro()

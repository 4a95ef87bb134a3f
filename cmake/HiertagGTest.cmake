# GoogleTest for the C++ tests, of this build's C++ ABI: the system's
# (Debian's libgtest-dev) where that ABI is the system's, else built here from
# the sources Debian ships with it (/usr/src/googletest).
# Out: GTest::gtest, GTest::gtest_main
if(HIERTAG_LINKS_SYSTEM_LIBRARIES)
  find_package(GTest REQUIRED)
  return()
endif()
set(HIERTAG_GTEST_SOURCE /usr/src/googletest CACHE PATH "GoogleTest sources, built with this build's C++ ABI")
if(NOT EXISTS "${HIERTAG_GTEST_SOURCE}/CMakeLists.txt")
  message(FATAL_ERROR "hiertag: the tests against this torch (pre-C++11 ABI) build GoogleTest from source: "
                      "none in ${HIERTAG_GTEST_SOURCE} (Debian: libgtest-dev), or -DHIERTAG_BUILD_TESTS=OFF")
endif()
set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
add_subdirectory("${HIERTAG_GTEST_SOURCE}" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
if(NOT TARGET GTest::gtest)  # googletest >= 1.12 defines the namespaced names itself
  add_library(GTest::gtest ALIAS gtest)
  add_library(GTest::gtest_main ALIAS gtest_main)
endif()

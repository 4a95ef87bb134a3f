# LibTorch from the Python environment that holds torch, for a plugin that
# compiles no CUDA code: torch's own include paths, its C++ ABI and pybind11
# ABI names, and only the CPU libraries (libtorch_cpu, libc10, libtorch_python).
# find_package(Torch) is not used: for the standard (CUDA) torch wheels it
# demands the CUDA toolkit (Caffe2Config.cmake includes public/cuda.cmake).
#
# In:  HIERTAG_PYTHON       the Python holding torch
# Out: HIERTAG_TORCH_VERSION, HIERTAG_TORCH_LIB_DIR, HIERTAG_TORCH_CXX11_ABI
#      hiertag::torch        INTERFACE target: headers, definitions, torch_cpu + c10
#      hiertag::torch_python INTERFACE target: hiertag::torch + libtorch_python + Python headers

# The torch releases hiertag supports: every function it hooks exists there and
# the end-to-end suite passes on them (README "Install").
set(HIERTAG_TORCH_OLDEST 2.4.0)
set(HIERTAG_TORCH_BEYOND 2.15.0)   # first release not yet supported

execute_process(
  COMMAND "${HIERTAG_PYTHON}" "${CMAKE_CURRENT_LIST_DIR}/torch_build_info.py"
  OUTPUT_VARIABLE _info ERROR_VARIABLE _info_error RESULT_VARIABLE _info_status
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _info_status EQUAL 0)
  string(STRIP "${_info_error}" _info_error)
  message(FATAL_ERROR "hiertag: cannot read torch's build settings from ${HIERTAG_PYTHON}: ${_info_error}")
endif()
string(REPLACE "\n" ";" _lines "${_info}")
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^([a-z0-9_]+)=(.*)$")
    list(APPEND _torch_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endif()
endforeach()
set(HIERTAG_TORCH_VERSION "${_torch_version}")
set(HIERTAG_TORCH_LIB_DIR "${_torch_library_dir}")
set(HIERTAG_TORCH_CXX11_ABI "${_torch_cxx11_abi}")

string(REGEX MATCH "^[0-9]+\\.[0-9]+\\.[0-9]+" _release "${HIERTAG_TORCH_VERSION}")
option(HIERTAG_ALLOW_UNSUPPORTED_TORCH "Build against a torch outside the supported range (untested)" OFF)
if((_release VERSION_LESS HIERTAG_TORCH_OLDEST OR NOT _release VERSION_LESS HIERTAG_TORCH_BEYOND)
   AND NOT HIERTAG_ALLOW_UNSUPPORTED_TORCH)
  message(FATAL_ERROR "hiertag: torch ${HIERTAG_TORCH_VERSION} (${HIERTAG_PYTHON}) is not supported: "
                      "hiertag supports torch >= ${HIERTAG_TORCH_OLDEST}, < ${HIERTAG_TORCH_BEYOND} "
                      "(-DHIERTAG_ALLOW_UNSUPPORTED_TORCH=ON builds anyway, untested)")
endif()

foreach(_library torch_cpu c10 torch_python)
  find_library(HIERTAG_LIB_${_library} NAMES ${_library} PATHS "${HIERTAG_TORCH_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
endforeach()

add_library(hiertag_torch INTERFACE)
add_library(hiertag::torch ALIAS hiertag_torch)
# torch's headers are third-party code: no warnings from them.
target_include_directories(hiertag_torch SYSTEM INTERFACE ${_torch_include_dirs})
target_link_libraries(hiertag_torch INTERFACE "${HIERTAG_LIB_torch_cpu}" "${HIERTAG_LIB_c10}")

set(Python3_EXECUTABLE "${HIERTAG_PYTHON}")
find_package(Python3 3.9 COMPONENTS Interpreter Development.Module REQUIRED)
add_library(hiertag_torch_python INTERFACE)
add_library(hiertag::torch_python ALIAS hiertag_torch_python)
target_compile_definitions(hiertag_torch_python INTERFACE ${_torch_pybind11_definitions})
target_link_libraries(hiertag_torch_python INTERFACE hiertag::torch "${HIERTAG_LIB_torch_python}" Python3::Module)

message(STATUS "hiertag: torch ${HIERTAG_TORCH_VERSION} (C++11 ABI ${HIERTAG_TORCH_CXX11_ABI}) from ${HIERTAG_PYTHON}")

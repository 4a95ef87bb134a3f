# nlohmann-json (header only): the `nlohmann-json` package of the Python
# environment that builds hiertag (PyPI: a pip install needs nothing from the
# system), else the system's CMake package (Debian's nlohmann-json3-dev: the
# tool built alone, with no Python).
# Out: hiertag::json
add_library(hiertag_json INTERFACE)
add_library(hiertag::json ALIAS hiertag_json)
set(_python "${HIERTAG_PYTHON}")
if(NOT _python AND DEFINED SKBUILD)
  set(_python "${Python_EXECUTABLE}")
endif()
if(_python)
  execute_process(COMMAND "${_python}" -c "import nlohmann_json; print(nlohmann_json.get_include())"
                  OUTPUT_VARIABLE _include RESULT_VARIABLE _status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_status EQUAL 0 AND EXISTS "${_include}/nlohmann/json.hpp")
    target_include_directories(hiertag_json SYSTEM INTERFACE "${_include}")
    message(STATUS "hiertag: nlohmann-json from ${_include}")
    return()
  endif()
endif()
find_package(nlohmann_json 3.10 QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "hiertag: nlohmann-json not found: `pip install nlohmann-json` in the Python environment "
                      "that builds hiertag, or the system's (Debian: nlohmann-json3-dev)")
endif()
target_link_libraries(hiertag_json INTERFACE nlohmann_json::nlohmann_json)

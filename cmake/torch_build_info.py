"""Prints what a C++ extension needs to build against the torch of this Python,
one `key=value` per line (a key repeated for each item of a list), for
cmake/HiertagTorch.cmake. These are the values
torch.utils.cpp_extension builds extensions with (its include and library
paths, the C++ ABI of torch's libstdc++ strings, the pybind11 ABI names that
let the extension share torch's pybind11 types); TorchConfig.cmake is not used
because it demands the CUDA toolkit for a CUDA build of torch, and hiertag
compiles no CUDA code."""

import sys

try:
    import torch
    from torch.utils import cpp_extension
except ImportError as error:
    sys.exit(f"hiertag: cannot import torch with {sys.executable}: {error}")

print(f"version={torch.__version__}")
for directory in cpp_extension.include_paths():
    print(f"include_dirs={directory}")
print(f"library_dir={cpp_extension.library_paths()[0]}")
print(f"cxx11_abi={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
# The pybind11 ABI names torch was built with, where it publishes them (2.4 does,
# 2.13 and 2.14 do not): an extension built with other names keeps a pybind11
# type registry of its own, and torch._C.Graph does not cast to std::shared_ptr<Graph>.
for attribute, macro in (("_PYBIND11_COMPILER_TYPE", "PYBIND11_COMPILER_TYPE"),
                         ("_PYBIND11_STDLIB", "PYBIND11_STDLIB"),
                         ("_PYBIND11_BUILD_ABI", "PYBIND11_BUILD_ABI")):
    value = getattr(torch._C, attribute, None)
    if value is not None:
        print(f'pybind11_definitions={macro}="{value}"')

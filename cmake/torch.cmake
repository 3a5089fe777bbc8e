# LibTorch for the torch layers: by default the copy inside the PyPI `torch` wheel of the
# project's virtual environment (scripts/install_deps.sh pins it), so that the C++ targets and
# every Python peer run on one torch. Defines the interface target replicator_libtorch
# (torch_cpu + c10, their headers and flags) and sets REPLICATOR_TORCH_ROOT and
# REPLICATOR_TORCH_VERSION; leaves replicator_libtorch undefined when no LibTorch is found.
#
# Another LibTorch 2.x (the libtorch zip, or another wheel): -DREPLICATOR_TORCH_ROOT=<dir>,
# the folder that holds include/, lib/ and share/cmake/Torch (for a wheel,
# python -c 'import torch, os; print(os.path.dirname(torch.__file__))').
#
# What find_package(Torch) needs that it does not say:
# - The wheel is built for CUDA, and its Caffe2Config looks for a CUDA toolkit even when only
#   torch_cpu is linked; the toolkit in /usr/local/cuda is handed to it when present.
# - Under CMake 3.25 its GPU detection fails unless TORCH_CUDA_ARCH_LIST is set: a default is
#   given (it decides nothing for the CPU targets).
# - With another LibTorch on the system (Debian's libtorch-dev), find_library can mix that
#   one's libc10.so into this one's targets unless the wheel's own folder leads the prefix
#   path.
# - The `torch` target links torch_cuda and the CUDA runtime (480 MB resident at start for a
#   CPU program); the CPU targets link torch_cpu and c10 only.

set(REPLICATOR_TORCH_ROOT "" CACHE PATH
  "LibTorch to build against: the folder holding include/, lib/ and share/cmake/Torch \
(default: the torch of REPLICATOR_VENV)")

function(_replicator_torch_root_from_venv out)
  set(python "${REPLICATOR_VENV}/bin/python")
  set(${out} "" PARENT_SCOPE)
  if(NOT EXISTS "${python}")
    return()
  endif()
  # Without the caller's PYTHONPATH: pip's isolated build (pip install .) puts a sitecustomize
  # there that hides every site-packages folder, the venv's too.
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH
      "${python}" -c "import os, torch; print(os.path.dirname(torch.__file__))"
    OUTPUT_VARIABLE root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND EXISTS "${root}/share/cmake/Torch/TorchConfig.cmake")
    set(${out} "${root}" PARENT_SCOPE)
  endif()
endfunction()

macro(replicator_find_torch)
  if(NOT REPLICATOR_TORCH_ROOT)
    _replicator_torch_root_from_venv(_replicator_torch_root)
    if(_replicator_torch_root)
      set(REPLICATOR_TORCH_ROOT "${_replicator_torch_root}" CACHE PATH
        "LibTorch to build against" FORCE)
    endif()
  endif()
  if(REPLICATOR_TORCH_ROOT)
    list(PREPEND CMAKE_PREFIX_PATH "${REPLICATOR_TORCH_ROOT}")
    set(Torch_DIR "${REPLICATOR_TORCH_ROOT}/share/cmake/Torch" CACHE PATH
      "TorchConfig.cmake of REPLICATOR_TORCH_ROOT" FORCE)
    if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
      set(CUDAToolkit_ROOT /usr/local/cuda)
    endif()
    if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
      set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING
        "GPU architectures for LibTorch's CUDA detection (9.0: H100/H200)")
    endif()
    find_package(Torch CONFIG QUIET)
  endif()
  if(Torch_FOUND AND TARGET torch_cpu AND TARGET c10)
    add_library(replicator_libtorch INTERFACE IMPORTED GLOBAL)
    target_link_libraries(replicator_libtorch INTERFACE torch_cpu c10)
    target_include_directories(replicator_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
    separate_arguments(_replicator_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
    target_compile_options(replicator_libtorch INTERFACE ${_replicator_torch_flags})
    set(REPLICATOR_TORCH_VERSION "${Torch_VERSION}")
    # Installed programs find LibTorch where they were linked against it (CMake leaves out
    # link folders inside the project, where the venv is).
    list(APPEND CMAKE_INSTALL_RPATH "${REPLICATOR_TORCH_ROOT}/lib")
    message(STATUS "replicator: LibTorch ${REPLICATOR_TORCH_VERSION} from ${REPLICATOR_TORCH_ROOT}")
  endif()
endmacro()

# Links `target` to LibTorch's `torch` target (torch_cuda and the CUDA libraries: a program
# that makes CUDA tensors). A wheel's torch_cuda needs the NCCL, cuDNN, ... of the wheel's
# nvidia/*/lib folders, which its RPATH names relative to $ORIGIN and the linker does not
# follow: without them first, the link takes the CUDA toolkit's older NCCL and fails.
function(replicator_link_torch_cuda target)
  target_link_libraries(${target} PRIVATE torch)
  file(GLOB _replicator_nvidia_libs LIST_DIRECTORIES true
    "${REPLICATOR_TORCH_ROOT}/../nvidia/*/lib")
  foreach(dir IN LISTS _replicator_nvidia_libs)
    target_link_options(${target} PRIVATE "LINKER:-rpath-link,${dir}")
  endforeach()
endfunction()

# The CUDA backend (engine/compute/cuda), included by the top-level CMakeLists.txt after
# impress_compute. IMPRESS_CUDA defaults to ON when nvcc is found; it is always OFF in sanitizer
# builds (ASan/TSan do not mix with the CUDA runtime). impress_cuda always exists: without CUDA
# it holds entry points that say the build has no CUDA (cuda-unavailable.cpp), so callers such
# as ModelContext (engine/runtime) need no #ifdef. With CUDA it holds the loader of the backend
# module libimpress-cuda.so (cuda-module.h) and defines IMPRESS_HAVE_CUDA=1 for its users.
include(CheckLanguage)
set(_impress_cuda_found OFF)
if(NOT IMPRESS_SANITIZE AND NOT IMPRESS_TSAN)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_impress_cuda_found ON)
  endif()
endif()
option(IMPRESS_CUDA "Build the CUDA backend (nvcc + cuBLAS)" ${_impress_cuda_found})
if(IMPRESS_SANITIZE OR IMPRESS_TSAN)
  set(IMPRESS_CUDA OFF)  # shadows the cache entry in this configuration only
elseif(IMPRESS_CUDA AND NOT _impress_cuda_found)
  message(FATAL_ERROR "IMPRESS_CUDA=ON but no CUDA compiler was found (put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
endif()

set(_cuda_dir ${CMAKE_SOURCE_DIR}/engine/compute/cuda)
set(_cuda_common ${_cuda_dir}/cuda-precision.cpp)
if(IMPRESS_CUDA)
  # sm_90 (H100/H200) machine code plus PTX that newer GPUs JIT-compile.
  set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING "CUDA architectures of the CUDA backend")
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "IMPRESS_CUDA: ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
  # The programs link the loader (cuda-loader.cpp): the backend itself is the module
  # libimpress-cuda.so next to them (cuda-module.h), loaded on first use, so that a CPU-only run
  # never maps cudart or cuBLAS. The module takes the engine symbols it uses from the executable,
  # which therefore exports its symbols; the module's own are hidden and bound inside it.
  set(CMAKE_ENABLE_EXPORTS ON)
  add_library(impress_cuda STATIC ${_cuda_common} ${_cuda_dir}/cuda-loader.cpp)
  target_link_libraries(impress_cuda PUBLIC impress_compute ${CMAKE_DL_LIBS})
  target_compile_definitions(impress_cuda PUBLIC IMPRESS_HAVE_CUDA=1)
  add_library(impress_cuda_module MODULE ${_cuda_common} ${_cuda_dir}/cuda-kernels.cu ${_cuda_dir}/cuda-backend.cpp
                                         ${_cuda_dir}/cuda-tier-memory.cpp ${_cuda_dir}/cuda-module.cpp)
  set_target_properties(impress_cuda_module PROPERTIES OUTPUT_NAME impress-cuda LIBRARY_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/bin CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
                        VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)
  # Built from engine sources alone: the include roots of engine/ and base/ (top-level CMakeLists.txt).
  target_include_directories(impress_cuda_module PRIVATE ${CMAKE_BINARY_DIR}/include/engine ${CMAKE_BINARY_DIR}/include/base)
  target_link_libraries(impress_cuda_module PRIVATE spdlog::spdlog CUDA::cudart_static CUDA::cublas)
  target_compile_definitions(impress_cuda_module PRIVATE IMPRESS_HAVE_CUDA=1)
  target_link_options(impress_cuda_module PRIVATE -Wl,-Bsymbolic)
  # Host-side warnings for the .cu file too (the C/C++ flags do not reach nvcc).
  target_compile_options(impress_cuda_module PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(IMPRESS_WERROR)
    target_compile_options(impress_cuda_module PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
  # Every program that links the loader finds a current module beside it.
  add_dependencies(impress_cuda impress_cuda_module)
else()
  message(STATUS "IMPRESS_CUDA: OFF")
  add_library(impress_cuda STATIC ${_cuda_common} ${_cuda_dir}/cuda-unavailable.cpp)
  target_link_libraries(impress_cuda PUBLIC impress_compute)
endif()

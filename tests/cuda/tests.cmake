# tests/cuda: cuda-backend-test (parity with the CPU backend; skips without a GPU) and
# kernel-emulation-test (the kernel bodies on the host; runs everywhere) are picked up by the
# *-test.cpp glob. Here: the GPU benchmark executable (not a test), used by scripts/gpu-check.sh.
add_executable(impress-cuda-bench ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda-bench-main.cpp)
target_link_libraries(impress-cuda-bench PRIVATE impress_pipeline nlohmann_json::nlohmann_json)

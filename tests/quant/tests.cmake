# tests/quant: the decode test runs tests/quant/quant-reference.py with $IMPRESS_PYTHON at run
# time, or else the interpreter this build was configured with. quant-kernels-bench prints GEMV
# bandwidth per type and path (an executable, not a test: nothing asserts on time).
if(TARGET quant-decode-test)
  target_compile_definitions(quant-decode-test PRIVATE IMPRESS_PYTHON_DEFAULT="${IMPRESS_PYTHON}")
endif()
add_executable(quant-kernels-bench ${CMAKE_CURRENT_LIST_DIR}/quant-kernels-bench.cpp)
target_link_libraries(quant-kernels-bench PRIVATE impress_quant)

# tests/quant: the decode test runs tests/quant/quant-reference.py with $IMPRESS_PYTHON at run
# time, or else the interpreter this build was configured with. (The kernels' speed is a
# benchmark: `impress bench kernels`.)
if(TARGET quant-decode-test)
  target_compile_definitions(quant-decode-test PRIVATE IMPRESS_PYTHON_DEFAULT="${IMPRESS_PYTHON}")
endif()

# tests/model: the C++ tests that call the Python reference (dequant-test, model-loader-test) find
# it through $IMPRESS_PYTHON at run time, or else the interpreter this build was configured with.
foreach(t dequant-test model-loader-test)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE IMPRESS_PYTHON_DEFAULT="${IMPRESS_PYTHON}")
  endif()
endforeach()

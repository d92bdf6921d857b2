# tests/model: the C++ tests that call the Python reference (dequant-test, model-loader-test) find
# it through $IMPRESS_PYTHON at run time, or else the interpreter this build was configured with.
foreach(t dequant-test model-loader-test quantize-test)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE IMPRESS_PYTHON_DEFAULT="${IMPRESS_PYTHON}")
  endif()
endforeach()

# End-to-end checks of whole models written by the quantizer against the numpy reference
# (real-shaped random models, quantization quality over 1,000+ tokens). They spend their time in
# numeric work the sanitizers add nothing to (the quantizer, writer and loader run under ASan in
# quantize-test and model-loader-test), so they run in the Release pass only: no-sanitizer.
foreach(name real-shapes-check quantized-quality-check)
  if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${name}.cpp)
    add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.cpp)
    target_link_libraries(${name} PRIVATE ${IMPRESS_TEST_LIBS})
    target_compile_definitions(${name} PRIVATE IMPRESS_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                               IMPRESS_PYTHON_DEFAULT="${IMPRESS_PYTHON}")
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS "no-sanitizer" ENVIRONMENT "IMPRESS_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  endif()
endforeach()

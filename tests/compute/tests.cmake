# tests/compute: reference-test runs tests/reference/*.py with the reference python ($IMPRESS_PYTHON
# at run time, else the interpreter this build was configured with); it skips when neither exists.
if(TARGET reference-test)
  target_compile_definitions(reference-test PRIVATE IMPRESS_PYTHON_DEFAULT="${IMPRESS_PYTHON}")
endif()

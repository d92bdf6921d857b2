# Tokenizer tests: tokenizer-test runs tests/tokenizer/tokenizer_reference.py with the reference
# python (cached in the temp dir across test processes).
if(TARGET tokenizer-test)
  target_compile_definitions(tokenizer-test PRIVATE IMPRESS_PYTHON_PATH="${IMPRESS_PYTHON}")
endif()

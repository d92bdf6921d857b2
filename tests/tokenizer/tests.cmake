# Tokenizer tests run reference scripts of this folder with the reference python (cached in
# the temp dir across test processes: tests/tokenizer/reference-cache.h).
foreach(t tokenizer-test chat-template-test)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE IMPRESS_PYTHON_PATH="${IMPRESS_PYTHON}")
  endif()
endforeach()

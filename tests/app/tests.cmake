# tests/app: tests that run the `impress` executable as users do (shared-store-test: models and
# programs sharing one store; terminal-input-test: bad prompts and stdin lines; process-start-test:
# what the program sets up for its libraries when it starts). They find it
# through IMPRESS_BINARY.
foreach(t shared-store-test terminal-input-test process-start-test)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE IMPRESS_BINARY="$<TARGET_FILE:impress>")
    add_dependencies(${t} impress)
  endif()
endforeach()

# tests/app: tests that run the `impress` executable as users do (shared-store-test: models and
# programs sharing one store). They find it through IMPRESS_BINARY.
if(TARGET shared-store-test)
  target_compile_definitions(shared-store-test PRIVATE IMPRESS_BINARY="$<TARGET_FILE:impress>")
  add_dependencies(shared-store-test impress)
endif()

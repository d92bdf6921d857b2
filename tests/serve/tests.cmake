# tests/serve: the C++ tests of the request/response functions link the server library; the
# Python tests start the real `impress serve` and drive it with the official openai client.
foreach(t openai-api-test serve-loopback-test serve-limits-test request-checks-test)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE impress_serve)
  endif()
endforeach()

# serve-openai-check: the real `impress serve` on a free loopback port, a temporary store, the
# default model, driven by the openai package of the reference venv (scripts/setup.sh pins it).
# The model's prefill under ASan makes its long-document and load steps far slower than their
# point; the request/response logic runs under the sanitizers in openai-api-test and the worker
# and HTTP layer in serve-loopback-test. `TIMEOUT` is a hang guard, far above a loaded run.
if(IMPRESS_PYTHON)
  add_test(NAME serve-openai-check
           COMMAND ${IMPRESS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/serve-openai-test.py $<TARGET_FILE:impress>
                   ${CMAKE_SOURCE_DIR}/assets)
  set_tests_properties(serve-openai-check PROPERTIES LABELS "no-sanitizer" TIMEOUT 900)
endif()

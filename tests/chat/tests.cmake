# The model library's fetch script against made-up wheels in a local folder (no network).
add_test(NAME pull-model-test
         COMMAND ${IMPRESS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/pull-model-test.py ${CMAKE_SOURCE_DIR}/assets/models/pull-model.py)
set_tests_properties(pull-model-test PROPERTIES LABELS "no-sanitizer" TIMEOUT 600)

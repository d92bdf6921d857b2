# The test scripts' own checks: scripts/check-skips.py judges every ctest run of scripts/test.sh,
# so what it allows and refuses is tested on made-up JUnit reports.
add_test(NAME check-skips-test
         COMMAND ${IMPRESS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check-skips-test.py ${CMAKE_SOURCE_DIR}/scripts/check-skips.py)
set_tests_properties(check-skips-test PROPERTIES LABELS "no-sanitizer")

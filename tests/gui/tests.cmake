# tests/gui: panels-test and snapshot-math-test (from the glob) draw the panels without a window
# and check the numbers they show; they need the GUI library. gui-script-check runs
# `impress gui --script` under xvfb-run (skips without xvfb-run or the default model) and checks
# the answers, the frame times and the screenshots' pixels. Mesa's GL driver does not pass LSan
# and the run is slow under ASan: no-sanitizer.
foreach(t panels-test snapshot-math-test)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE impress_gui)
  endif()
endforeach()

add_executable(gui-script-check ${CMAKE_CURRENT_LIST_DIR}/gui-script-check.cpp)
target_link_libraries(gui-script-check PRIVATE impress_gui GTest::gtest_main)
target_compile_definitions(gui-script-check PRIVATE IMPRESS_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                           IMPRESS_BINARY="$<TARGET_FILE:impress>")
add_dependencies(gui-script-check impress)
add_test(NAME gui-script-check COMMAND gui-script-check)
set_tests_properties(gui-script-check PROPERTIES LABELS "no-sanitizer" TIMEOUT 300
                     ENVIRONMENT "IMPRESS_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# gui-prefill-check: the UI frame time during a ~4,000-token prefill (a GPL slice), measured in a
# scripted session and printed; fails only on a gross stall. Same skips and label as above.
add_executable(gui-prefill-check ${CMAKE_CURRENT_LIST_DIR}/gui-prefill-check.cpp)
target_link_libraries(gui-prefill-check PRIVATE GTest::gtest_main)
target_compile_definitions(gui-prefill-check PRIVATE IMPRESS_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                           IMPRESS_BINARY="$<TARGET_FILE:impress>")
add_dependencies(gui-prefill-check impress)
add_test(NAME gui-prefill-check COMMAND gui-prefill-check)
set_tests_properties(gui-prefill-check PROPERTIES LABELS "no-sanitizer" TIMEOUT 300
                     ENVIRONMENT "IMPRESS_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# tests/gui: panels-test and snapshot-math-test (from the glob) draw the panels without a window
# and check the numbers they show; they need the GUI library. gui-script-check runs
# `impress gui --script` under xvfb-run (skips without xvfb-run or the default model) and checks
# the answers, reuse and the screenshots' pixels. Mesa's GL driver does not pass LSan and the run
# is slow under ASan: no-sanitizer. Frame times are measured by bench/gui-prefill-bench.sh, not
# asserted here.
foreach(t panels-test snapshot-math-test cache-view-test redraw-pacer-test text-format-test model-info-test)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE impress_gui)
  endif()
endforeach()

# A scripted check: an executable that runs `impress gui --script` under xvfb-run (skips without
# it or the default model); not under sanitizers (Mesa's GL driver does not pass LSan). Its
# scripts wait for the worker's events; `timeout` is only a hang guard, far above a loaded run.
function(impress_gui_check name timeout)
  add_executable(${name} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${name}.cpp)
  target_link_libraries(${name} PRIVATE impress_gui GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE IMPRESS_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                             IMPRESS_BINARY="$<TARGET_FILE:impress>")
  add_dependencies(${name} impress)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "no-sanitizer" TIMEOUT ${timeout}
                       ENVIRONMENT "IMPRESS_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()

# gui-script-check: a document (and a missing one), two questions, alpha changed, ask again with
# the fidelity check, screenshots whose pixels are checked.
impress_gui_check(gui-script-check 3600)
# gui-session-check: saved conversations reopen after a restart and reuse their cached prefix;
# pin / drop a document's cache; retrieval mode; bad files. Two scripted runs.
impress_gui_check(gui-session-check 3600)
# gui-model-check: the model picker's path: a tiny random model made by make-tiny-model.py (with
# the reference Python's gguf package) is loaded in the running app, its KV kept apart; a model
# that will not fit (a faked MemAvailable) is refused. Two scripted runs.
impress_gui_check(gui-model-check 3600)
target_compile_definitions(gui-model-check PRIVATE IMPRESS_PYTHON_DEFAULT="${IMPRESS_PYTHON}")

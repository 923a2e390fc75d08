# Run at every build (cmake -P, the st_git_commit target): writes OUT, the one
# source file that holds the commit the sources were at when the programs
# were built, `git rev-parse --short=12 HEAD` in SRC, with "-dirty" when
# tracked files differ from it ("unknown" outside a git checkout). OUT is
# rewritten only when that text changes, so an unchanged commit recompiles
# nothing and a new one recompiles this file and relinks: run.json's
# git_commit is the binary's own, not the commit CMake last configured at.
# Usage: cmake -DSRC=DIR -DOUT=FILE -P git_commit.cmake
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SRC}"
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT commit)
  set(commit "unknown")
else()
  execute_process(COMMAND git diff-index --quiet HEAD -- WORKING_DIRECTORY "${SRC}"
    RESULT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "// Generated at build time by cmake/git_commit.cmake. Do not edit.
#include \"core/build_commit.hpp\"

const char* st::build_commit() { return \"${commit}\"; }
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()

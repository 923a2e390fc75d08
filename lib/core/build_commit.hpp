// The commit the program was built from: `git rev-parse --short=12 HEAD` of
// the source tree at build time ("-dirty" when tracked files differed from
// it, "unknown" outside a git checkout). Written at every build by
// cmake/git_commit.cmake into one generated source file (target
// st_build_commit), so a new commit relinks the programs instead of
// reconfiguring the build, and run.json names the binary's own commit.
#pragma once

namespace st {
const char* build_commit();
}  // namespace st

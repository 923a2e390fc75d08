// The backend library loader's ABI check (label cuda-host): real libraries
// dlopen'd through backend_for(runtime.device=cuda) with
// SCALETRAIN_BACKEND_DIR pointing at them. A library built from other seam
// headers is refused by name with both hashes; one whose create() fails is
// refused with its reason; a missing one names the path. All are
// UsageErrors (exit 2 in the programs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "scaletrain/seam_hash.hpp"

namespace {
std::string load_error(const std::string& dir) {
  setenv("SCALETRAIN_BACKEND_DIR", dir.c_str(), 1);
  st::Config cfg;
  cfg.runtime.device = "cuda";
  try {
    st::backend_for(cfg);
  } catch (const st::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(BackendLoader, StaleLibraryIsRefusedByNameWithBothHashes) {
  const std::string e = load_error(FAKE_STALE_DIR);
  EXPECT_NE(e.find(std::string(FAKE_STALE_DIR) + "/libscaletrain_cuda.so' is stale"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("library seam hash 0123456789abcdef, this program " +
                   std::string(SCALETRAIN_SEAM_HASH)),
            std::string::npos)
      << e;
}

TEST(BackendLoader, MatchingLibraryIsAskedAndItsReasonPassedOn) {
  const std::string e = load_error(FAKE_REFUSE_DIR);
  EXPECT_NE(e.find("libscaletrain_cuda.so': no GPU in this test library"), std::string::npos) << e;
}

TEST(BackendLoader, MissingLibraryNamesThePath) {
  const std::string e = load_error(std::string(FAKE_STALE_DIR) + "/nowhere");
  EXPECT_NE(e.find("nowhere/libscaletrain_cuda.so' does not exist"), std::string::npos) << e;
}

TEST(BackendLoader, SeamHashIsSixteenHexDigits) {
  const std::string h = SCALETRAIN_SEAM_HASH;
  ASSERT_EQ(h.size(), 16u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
}
}  // namespace

// lib/core logging: every line rank 0 logs (stdout and the run folder's
// log.txt) and every warning line starts with the UTC time in ISO 8601, a
// multi-line message on each of its lines, a warning's lines with the rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/log.hpp"

namespace {
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}
std::time_t parse_utc(const std::string& iso) {
  std::tm tm{};
  EXPECT_NE(strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm), nullptr) << iso;
  return timegm(&tm);
}
}  // namespace

TEST(CoreLog, EveryLineStartsWithTheUtcTime) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("st_log_" + std::to_string(getpid()) + ".txt"))
          .string();
  std::filesystem::remove(path);
  const std::time_t before = std::time(nullptr);
  st::log_set_rank(0);
  st::log_open_file(path);
  st::log0("step     1/4 | loss 5.5452");
  st::log0("first line\nsecond line\n");
  st::logw("a warning\nits detail");
  st::log_close_file();
  const std::time_t after = std::time(nullptr);
  const auto l = lines_of(path);
  std::filesystem::remove(path);
  const std::vector<std::string> want{"step     1/4 | loss 5.5452", "first line", "second line",
                                      "[rank 0] a warning", "[rank 0] its detail"};
  ASSERT_EQ(l.size(), want.size());
  const std::regex iso(R"(^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (.*)$)");
  for (size_t i = 0; i < l.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l[i], m, iso)) << l[i];
    EXPECT_EQ(m[2].str(), want[i]);
    const std::time_t t = parse_utc(m[1].str());
    EXPECT_GE(t, before) << l[i];
    EXPECT_LE(t, after) << l[i];
  }
}

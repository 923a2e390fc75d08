// A fresh temporary folder per test, removed at the end.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

struct TmpDir {
  std::filesystem::path p;
  TmpDir() {
    auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
    p = std::filesystem::temp_directory_path() /
        ("st_analyze_" + std::string(t->test_suite_name()) + "_" + t->name() + "_" +
         std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
  }
  ~TmpDir() { std::filesystem::remove_all(p); }
  std::string operator/(const std::string& s) const { return (p / s).string(); }
};

// A CSV file of published figures (analysis/reference/*.csv) as
// header-named records, with errors naming file, line and column: what
// mpt-fit and the published-table check read.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace st::plan {

struct Csv {
  std::string path;
  std::vector<std::string> head;
  std::vector<std::pair<int, std::vector<std::string>>> rows;  // (line, fields)
  const std::string& at(size_t row, const std::string& col) const;
  double num(size_t row, const std::string& col) const;
};
// UsageError when the file is missing or empty, or a row's field count
// differs from the header's.
Csv load_csv(const std::string& path);

}  // namespace st::plan

// Implementation of csv.hpp.
#include "planner/csv.hpp"

#include <fstream>
#include <stdexcept>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st::plan {

const std::string& Csv::at(size_t row, const std::string& col) const {
  for (size_t i = 0; i < head.size(); ++i)
    if (head[i] == col) return rows[row].second[i];
  throw UsageError(path + ":1: missing column '" + col + "'");
}

double Csv::num(size_t row, const std::string& col) const {
  const std::string& v = at(row, col);
  try {
    size_t pos = 0;
    const double d = std::stod(v, &pos);
    if (pos == v.size()) return d;
  } catch (const std::logic_error&) {
  }
  throw UsageError(path + ":" + std::to_string(rows[row].first) + ": column '" + col +
                   "': not a number: '" + v + "'");
}

Csv load_csv(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError("cannot open '" + path + "'");
  Csv c;
  c.path = path;
  std::string line;
  if (!std::getline(f, line)) throw UsageError(path + ": empty file");
  c.head = split_csv_line(line);
  for (int ln = 2; std::getline(f, line); ++ln) {
    if (line.empty()) continue;
    auto v = split_csv_line(line);
    if (v.size() != c.head.size())
      throw UsageError(path + ":" + std::to_string(ln) + ": " + std::to_string(v.size()) +
                       " fields, the header has " + std::to_string(c.head.size()));
    c.rows.push_back({ln, v});
  }
  return c;
}

}  // namespace st::plan

// The pipeline split: how many layers each model chunk (virtual pipeline
// stage) holds. parallel.pipeline_layers lists them for an uneven split
// (Megatron's pipeline layout and torchtitan's split points give the same
// freedom: any positive count per virtual stage); without it the layers
// split evenly. Parsing and every check live here so the trainer, the dry
// run and the planner all read one answer (pipeline_layer_counts).
#include <cctype>
#include <charconv>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/layout_tools.hpp"
#include "core/error.hpp"

namespace st {
namespace {

const char* kKey = "parallel.pipeline_layers";

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

}  // namespace

// "15,16,16,16,15" -> "15,16*3,15" (runs of 3 or more).
std::string pipeline_layers_spec(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(v[i]);
    if (j - i >= 3) {
      s += "*" + std::to_string(j - i);
      i = j;
    } else {
      ++i;
    }
  }
  return s;
}

namespace {
std::string compact(const std::vector<int>& v) { return pipeline_layers_spec(v); }

// A split of n layers into k parts that differ by at most one, the extra
// layers on the middle parts first (the first and last stage also hold the
// embedding and the head), as torchtitan's default split points do.
std::vector<int> balanced(int n, int k) {
  std::vector<int> v(size_t(k), n / k);
  int extra = n % k;
  for (int i = 1; i + 1 < k && extra > 0; ++i, --extra) ++v[size_t(i)];
  if (extra > 0) ++v.back(), --extra;
  if (extra > 0) ++v.front();
  return v;
}

int parse_count(const std::string& text, const std::string& entry) {
  int v = 0;
  const std::string t = trim(text);
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size())
    throw UsageError(std::string(kKey) + ": '" + entry +
                     "' is not a layer count; write one integer per model chunk, or "
                     "COUNT*REPEAT, separated by commas (e.g. 3,1 or 15,16*6,15)");
  return v;
}

std::vector<int> parse(const std::string& spec) {
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    const size_t comma = spec.find(',', start);
    const std::string entry = trim(spec.substr(start, comma - start));
    const size_t star = entry.find('*');
    const int count = parse_count(entry.substr(0, star), entry);
    const int repeat = star == std::string::npos ? 1 : parse_count(entry.substr(star + 1), entry);
    if (repeat < 1 || repeat > 1 << 20)
      throw UsageError(std::string(kKey) + ": '" + entry + "' repeats a count " +
                       std::to_string(repeat) + " times; a repeat must be >= 1");
    if (count < 1)
      throw UsageError(std::string(kKey) + ": '" + entry + "' gives a model chunk " +
                       std::to_string(count) +
                       " layers; every chunk needs at least 1 layer (a count >= 1)");
    out.insert(out.end(), size_t(repeat), count);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace

std::vector<int> pipeline_split_ends(int n_layers, int chunks) {
  if (chunks < 2) return {n_layers};
  // The embedding and the head (with the loss) count as one layer each, on
  // the first and the last model chunk: n + 2 units split evenly.
  std::vector<int> v = balanced(n_layers + 2, chunks);
  --v.front();
  --v.back();
  for (int x : v)
    if (x < 1) return {};
  return v;
}

std::vector<int> pipeline_layer_counts(const Config& cfg) {
  const auto& p = cfg.parallel;
  const int n = cfg.model.n_layers, k = p.pp * p.num_model_chunks;
  const std::string chunks = "parallel.pp * parallel.num_model_chunks = " + std::to_string(p.pp) +
                             "*" + std::to_string(p.num_model_chunks) + " = " + std::to_string(k);
  if (n < k)
    throw UsageError("model.n_layers=" + std::to_string(n) + " is fewer than " + chunks +
                     " model chunks, and every chunk needs at least 1 layer; choose n_layers >= " +
                     std::to_string(k) + ", or lower parallel.pp or parallel.num_model_chunks");
  if (trim(p.pipeline_layers).empty()) {
    if (n % k != 0) {
      const int lo = n / k * k;
      throw UsageError("model.n_layers=" + std::to_string(n) + " does not split evenly over " +
                       chunks + " model chunks; choose n_layers a multiple of " +
                       std::to_string(k) + " (e.g. " + (lo > 0 ? std::to_string(lo) + " or " : "") +
                       std::to_string(lo + k) + "), or set " + kKey +
                       " to the layers of each chunk (e.g. " + kKey + "=" +
                       compact(balanced(n, k)) + ")");
    }
    return std::vector<int>(size_t(k), n / k);
  }
  std::vector<int> v = parse(p.pipeline_layers);
  if (int(v.size()) != k)
    throw UsageError(std::string(kKey) + "=" + p.pipeline_layers + " lists " +
                     std::to_string(v.size()) + " model chunks; it needs " + std::to_string(k) +
                     " counts, one per chunk (" + chunks +
                     "; chunk c of stage s is entry c*pp + s), e.g. " + compact(balanced(n, k)));
  long long sum = 0;
  for (int x : v) sum += x;
  if (sum != n)
    throw UsageError(std::string(kKey) + "=" + p.pipeline_layers + " sums to " +
                     std::to_string(sum) + " layers, but model.n_layers=" + std::to_string(n) +
                     "; the counts must add up to n_layers (e.g. " + compact(balanced(n, k)) + ")");
  return v;
}

}  // namespace st

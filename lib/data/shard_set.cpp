// Implementation of shard_set.hpp: listing a folder or glob, opening each
// shard (formats.cpp), its optional JSON sidecar, the one-format-one-dtype
// rule, and reads across shard boundaries with the id range check.
#include "data/shard_set.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/util.hpp"

namespace fs = std::filesystem;

namespace st {
namespace {
bool has_suffix(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool is_regular(const std::string& p) {
  struct stat sb;
  return ::stat(p.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
}
}  // namespace

std::vector<std::string> list_shards(const std::string& path, const std::string& key) {
  std::vector<std::string> out;
  struct stat sb;
  if (::stat(path.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string p = e.path().string();
      if (has_suffix(p, ".bin") && is_regular(p)) out.push_back(p);
    }
    if (ec) throw UsageError(key + ": cannot list folder '" + path + "': " + ec.message());
    if (out.empty())
      throw UsageError(key + ": '" + path +
                       "' is a folder with no *.bin token files in it (a folder of shards is "
                       "read as its *.bin files in name order)");
  } else if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(path.c_str(), GLOB_NOSORT, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
      const std::string p = g.gl_pathv[i];
      if (!has_suffix(p, ".idx") && !has_suffix(p, ".json") && is_regular(p)) out.push_back(p);
    }
    ::globfree(&g);
    if (out.empty())
      throw UsageError(key + ": the pattern '" + path +
                       "' matches no token files (*.idx and *.json matches are not shards)");
  } else {
    return {path};
  }
  std::sort(out.begin(), out.end());  // byte order, whatever the locale
  return out;
}

ShardSet::ShardSet(const std::string& path, const std::string& format, const std::string& raw_dtype,
                   int vocab, const std::string& key)
    : path_(path), key_(key), vocab_(vocab) {
  for (const std::string& f : list_shards(path, key)) {
    Shard s = Shard::open(f, format, raw_dtype, key);
    if (!shards_.empty()) {
      const Shard& a = shards_.front();
      if (s.format() != a.format() || s.type() != a.type())
        throw UsageError(key + ": shard '" + s.path() + "' is " + s.format() + " " +
                         tok_type_name(s.type()) + " but the first shard '" + a.path() + "' is " +
                         a.format() + " " + tok_type_name(a.type()) +
                         "; the shards of one path must share one format and dtype");
    }
    check_sidecar(s);
    begin_.push_back(total_);
    total_ += s.size();
    shards_.push_back(std::move(s));
  }
}

void ShardSet::read(uint64_t start, int count, int32_t* out) const {
  // The shard holding `start`: the last whose first index is <= start.
  size_t k = size_t(std::upper_bound(begin_.begin(), begin_.end(), start) - begin_.begin()) - 1;
  int done = 0;
  while (done < count) {
    while (start - begin_[k] >= shards_[k].size()) ++k;  // skips empty shards too
    const Shard& s = shards_[k];
    const uint64_t first = start - begin_[k];
    const uint64_t n = std::min<uint64_t>(uint64_t(count - done), s.size() - first);
    s.check_index(first, n);  // Megatron: the index entries of the sequences read
    for (uint64_t j = 0; j < n; ++j) {
      const int64_t id = s.at(first + j);
      if (id < 0 || id >= vocab_) {
        const uint64_t off = s.data_offset() + (first + j) * uint64_t(tok_type_width(s.type()));
        throw UsageError(key_ + ": '" + s.path() + "' holds token id " + std::to_string(id) +
                         " at byte offset " + std::to_string(off) + " (id " +
                         std::to_string(first + j) + " of the file), but model.vocab_size is " +
                         std::to_string(vocab_) + " (valid ids: 0.." + std::to_string(vocab_ - 1) +
                         ")");
      }
      out[done + int(j)] = int32_t(id);
    }
    done += int(n);
    start += n;
  }
}

void ShardSet::verify() const {
  uint64_t bad = 0;
  std::string list;
  for (const Shard& s : shards_) {
    s.check_whole_index();
    const uint64_t w = uint64_t(tok_type_width(s.type()));
    for (uint64_t j = 0; j < s.size(); ++j) {
      const int64_t id = s.at(j);
      if (id >= 0 && id < vocab_) continue;
      if (++bad <= uint64_t(kMaxListed))
        list += "\n  '" + s.path() + "' byte offset " + std::to_string(s.data_offset() + j * w) +
                ": id " + std::to_string(id);
    }
  }
  if (bad == 0) return;
  std::string more;
  if (bad > uint64_t(kMaxListed))
    more = "\n  ... and " + std::to_string(bad - uint64_t(kMaxListed)) + " more";
  throw UsageError(key_ + ": data.verify=full found " + std::to_string(bad) +
                   " token id(s) outside model.vocab_size " + std::to_string(vocab_) +
                   " (valid ids: 0.." + std::to_string(vocab_ - 1) + ") in " + path_ + ":" + list +
                   more);
}

std::string ShardSet::describe() const {
  std::string d = path_ + " (" + format() + ", " + tok_type_name(type()) + ", " +
                  std::to_string(total_) + " tokens";
  if (shards_.size() > 1) d += " in " + std::to_string(shards_.size()) + " shards";
  return d + ")";
}

// The sidecar `<file>.json` (docs/data.md): every field optional, each of its
// type and range, checked against the shard and the config.
void ShardSet::check_sidecar(const Shard& s) const {
  const std::string side = s.path() + ".json";
  struct stat sb;
  if (::stat(side.c_str(), &sb) != 0) return;
  if (!S_ISREG(sb.st_mode))
    throw UsageError(key_ + ": sidecar '" + side + "' is not a regular file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(side));
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(key_ + ": sidecar '" + side + "' is not valid JSON: " + e.what());
  }
  auto bad = [&](const std::string& field, const std::string& valid, const nlohmann::json& got) {
    std::string g = got.dump();
    if (g.size() > 60) g = g.substr(0, 57) + "...";
    return UsageError(key_ + ": sidecar '" + side + "': field '" + field + "' must be " + valid +
                      ", got " + g);
  };
  if (!j.is_object()) throw bad("<document>", "a JSON object", j);
  if (auto it = j.find("dtype"); it != j.end()) {
    if (!it->is_string() || (*it != "uint16" && *it != "uint32"))
      throw bad("dtype", "\"uint16\" or \"uint32\"", *it);
    const std::string sd = it->get<std::string>(), have = tok_type_name(s.type());
    if (sd != have) {
      if (s.format() == "raw")
        throw UsageError("data.dtype: '" + have + "' but '" + side + "' says the file is " + sd +
                         "; set data.dtype=" + sd);
      throw UsageError(key_ + ": sidecar '" + side + "' says " + sd + " but the " + s.format() +
                       " header of '" + s.path() + "' says " + have);
    }
  }
  if (auto it = j.find("vocab_size"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1ll << 32))
      throw bad("vocab_size", "an integer in [1, 2^32]", *it);
    if (it->get<int64_t>() > vocab_)
      throw UsageError("model.vocab_size: " + std::to_string(vocab_) + " but token file '" +
                       s.path() + "' uses a vocabulary of " + std::to_string(it->get<int64_t>()) +
                       " (its sidecar '" + side + "')");
  }
  if (auto it = j.find("n_tokens"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      throw bad("n_tokens", "a non-negative integer", *it);
    if (uint64_t(it->get<int64_t>()) != s.size())
      throw UsageError(key_ + ": '" + s.path() + "' holds " + std::to_string(s.size()) +
                       " tokens but its sidecar says " + std::to_string(it->get<int64_t>()) +
                       ": the file is truncated or was changed");
  }
}

}  // namespace st

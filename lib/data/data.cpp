// Implementation of data.hpp: synthetic and memory-mapped token sources and
// the layout-independent sampler.
#include "data/data.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {
std::string file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISSOCK(m)) return "a socket";
  return "a special file";
}

uint64_t mix(uint64_t seed, uint64_t index) {
  uint64_t s = seed * 0x632BE59BD9B4E019ull ^ (index + 0x9E3779B97F4A7C15ull);
  return splitmix64(s);
}

class SyntheticSource final : public TokenSource {
 public:
  SyntheticSource(uint64_t seed, int vocab) : seed_(seed), vocab_(vocab) {}
  void sample(uint64_t index, int seq_len, int32_t* out) const override {
    uint64_t s = mix(seed_, index);
    for (int t = 0; t <= seq_len; ++t) out[t] = int32_t(splitmix64(s) % uint64_t(vocab_));
  }
  std::string describe() const override {
    return "synthetic (seed " + std::to_string(seed_) + ", vocab " + std::to_string(vocab_) + ")";
  }

 private:
  uint64_t seed_;
  int vocab_;
};

class FileSource final : public TokenSource {
 public:
  FileSource(const std::string& path, const std::string& dtype, uint64_t seed, int vocab,
             int seq_len)
      : path_(path), seed_(seed) {
    if (dtype != "uint16" && dtype != "uint32")
      throw UsageError("data.dtype: '" + dtype + "' is not valid; choose uint16 or uint32");
    width_ = dtype == "uint16" ? 2 : 4;
    // A FIFO, device or folder would block open() or fail mmap(): only a
    // regular file can be a token file.
    struct stat st0;
    if (::stat(path.c_str(), &st0) == 0 && !S_ISREG(st0.st_mode))
      throw UsageError("data.path: '" + path + "' is " + file_kind(st0.st_mode) +
                       ", not a regular file (the token file is memory-mapped; make one with "
                       "scaletrain-tokenize)");
    check_sidecar(dtype, vocab);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw UsageError("data.path: cannot open token file '" + path + "': " + std::strerror(errno) +
                       " (make one with scaletrain-tokenize, or set data.source=synthetic)");
    struct stat sb;
    ::fstat(fd, &sb);
    bytes_ = size_t(sb.st_size);
    if (bytes_ % width_ != 0) {
      ::close(fd);
      throw UsageError("data.path: '" + path + "' has " + std::to_string(bytes_) +
                       " bytes, not a multiple of " + std::to_string(width_) + " (" + dtype +
                       "): truncated or not a " + dtype + " token file");
    }
    n_ = bytes_ / width_;
    if (expected_tokens_ >= 0 && uint64_t(expected_tokens_) != n_) {
      ::close(fd);
      throw UsageError("data.path: '" + path + "' holds " + std::to_string(n_) +
                       " tokens but its sidecar says " + std::to_string(expected_tokens_) +
                       ": the file is truncated or was changed");
    }
    if (n_ < uint64_t(seq_len) + 2) {
      ::close(fd);
      throw UsageError("data.path: '" + path + "' holds " + std::to_string(n_) +
                       " tokens, fewer than model.seq_len+2 = " + std::to_string(seq_len + 2));
    }
    map_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map_ == MAP_FAILED) throw UsageError("data.path: cannot mmap '" + path + "'");
    // Every token must be a valid id for the model.
    uint64_t maxv = 0;
    for (uint64_t i = 0; i < n_; ++i) maxv = std::max<uint64_t>(maxv, at(i));
    if (maxv >= uint64_t(vocab)) {
      ::munmap(map_, bytes_);
      throw UsageError("data.path: '" + path + "' contains token id " + std::to_string(maxv) +
                       " but model.vocab_size is " + std::to_string(vocab) +
                       " (valid ids: 0.." + std::to_string(vocab - 1) + ")");
    }
  }
  ~FileSource() override {
    if (map_ && map_ != MAP_FAILED) ::munmap(map_, bytes_);
  }
  void sample(uint64_t index, int seq_len, int32_t* out) const override {
    uint64_t span = n_ - uint64_t(seq_len) - 1;
    uint64_t start = mix(seed_, index) % span;
    for (int t = 0; t <= seq_len; ++t) out[t] = int32_t(at(start + uint64_t(t)));
  }
  std::string describe() const override {
    return path_ + " (" + std::to_string(n_) + " tokens, " + (width_ == 2 ? "uint16" : "uint32") +
           ")";
  }

 private:
  uint64_t at(uint64_t i) const {
    if (width_ == 2) return static_cast<const uint16_t*>(map_)[i];
    return static_cast<const uint32_t*>(map_)[i];
  }
  // The sidecar `<file>.json` (docs/data.md): every field optional, each of
  // its type and range, checked against the config.
  void check_sidecar(const std::string& dtype, int vocab) {
    const std::string side = path_ + ".json";
    struct stat sb;
    if (::stat(side.c_str(), &sb) != 0) return;
    if (!S_ISREG(sb.st_mode))
      throw UsageError("data.path: sidecar '" + side + "' is " + file_kind(sb.st_mode) +
                       ", not a regular file");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(side));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError("data.path: sidecar '" + side + "' is not valid JSON: " + e.what());
    }
    auto bad = [&](const std::string& field, const std::string& valid, const nlohmann::json& got) {
      std::string g = got.dump();
      if (g.size() > 60) g = g.substr(0, 57) + "...";
      return UsageError("data.path: sidecar '" + side + "': field '" + field + "' must be " +
                        valid + ", got " + g);
    };
    if (!j.is_object()) throw bad("<document>", "a JSON object", j);
    if (auto it = j.find("dtype"); it != j.end()) {
      if (!it->is_string() || (*it != "uint16" && *it != "uint32"))
        throw bad("dtype", "\"uint16\" or \"uint32\"", *it);
      const std::string sd = it->get<std::string>();
      if (sd != dtype)
        throw UsageError("data.dtype: '" + dtype + "' but '" + side + "' says the file is " + sd +
                         "; set data.dtype=" + sd);
    }
    if (auto it = j.find("vocab_size"); it != j.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1ll << 32))
        throw bad("vocab_size", "an integer in [1, 2^32]", *it);
      if (it->get<int64_t>() > vocab)
        throw UsageError("model.vocab_size: " + std::to_string(vocab) + " but token file '" +
                         path_ + "' uses a vocabulary of " + std::to_string(it->get<int64_t>()) +
                         " (its sidecar '" + side + "')");
    }
    if (auto it = j.find("n_tokens"); it != j.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 0)
        throw bad("n_tokens", "a non-negative integer", *it);
      expected_tokens_ = it->get<int64_t>();
    }
  }

  std::string path_;
  uint64_t seed_;
  size_t width_ = 2, bytes_ = 0;
  uint64_t n_ = 0;
  int64_t expected_tokens_ = -1;
  void* map_ = nullptr;
};
}  // namespace

std::unique_ptr<TokenSource> make_synthetic_source(uint64_t seed, int vocab_size) {
  return std::make_unique<SyntheticSource>(seed, vocab_size);
}

std::unique_ptr<TokenSource> make_file_source(const std::string& path, const std::string& dtype,
                                              uint64_t seed, int vocab_size, int seq_len) {
  return std::make_unique<FileSource>(path, dtype, seed, vocab_size, seq_len);
}

std::unique_ptr<TokenSource> make_source(const DataCfg& d, uint64_t seed, int vocab_size,
                                         int seq_len) {
  if (d.source == "synthetic") return make_synthetic_source(seed, vocab_size);
  if (d.source == "file") {
    if (d.path.empty()) throw UsageError("data.path: required when data.source=file");
    return make_file_source(d.path, d.dtype, seed, vocab_size, seq_len);
  }
  throw UsageError("data.source: '" + d.source + "' is not valid; choose synthetic or file");
}

DataLoader::DataLoader(std::unique_ptr<TokenSource> src, int seq_len, int micro_batch,
                       int grad_accum, int dp, int dp_rank)
    : src_(std::move(src)),
      seq_len_(seq_len),
      micro_batch_(micro_batch),
      grad_accum_(grad_accum),
      dp_(dp),
      dp_rank_(dp_rank) {}

void DataLoader::get(long step, int micro, MicroBatch& mb) const {
  mb.B = micro_batch_;
  mb.T = seq_len_;
  mb.tokens.resize(size_t(micro_batch_) * seq_len_);
  mb.targets.resize(size_t(micro_batch_) * seq_len_);
  std::vector<int32_t> buf(size_t(seq_len_) + 1);
  // Global sample order within a step: micro-step major, then dp rank, then
  // row; the 1-rank run with micro_batch*dp rows reads the same samples.
  uint64_t base = uint64_t(step - 1) * uint64_t(global_batch()) +
                  uint64_t(micro) * uint64_t(micro_batch_) * dp_ + uint64_t(dp_rank_) * micro_batch_;
  for (int b = 0; b < micro_batch_; ++b) {
    src_->sample(base + uint64_t(b), seq_len_, buf.data());
    std::memcpy(&mb.tokens[size_t(b) * seq_len_], buf.data(), size_t(seq_len_) * 4);
    std::memcpy(&mb.targets[size_t(b) * seq_len_], buf.data() + 1, size_t(seq_len_) * 4);
  }
}
}  // namespace st

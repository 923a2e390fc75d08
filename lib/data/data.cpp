// Implementation of data.hpp: synthetic and file token sources and the
// layout-independent sampler.
#include "data/data.hpp"

#include <cstring>

#include "core/error.hpp"
#include "data/shard_set.hpp"

namespace st {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {
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

// One stream of ids over the shards of a path (shard_set.hpp); sample i
// starts at mix(seed, i) mod (n - seq_len - 1).
class FileSource final : public TokenSource {
 public:
  FileSource(const std::string& path, const std::string& format, const std::string& dtype,
             uint64_t seed, int vocab, int seq_len, const std::string& key)
      : set_(path, format, dtype, vocab, key), seed_(seed) {
    if (set_.size() < uint64_t(seq_len) + 2)
      throw UsageError(key + ": '" + path + "' holds " + std::to_string(set_.size()) +
                       " tokens, fewer than model.seq_len+2 = " + std::to_string(seq_len + 2));
  }
  void sample(uint64_t index, int seq_len, int32_t* out) const override {
    const uint64_t span = set_.size() - uint64_t(seq_len) - 1;
    set_.read(mix(seed_, index) % span, seq_len + 1, out);
  }
  std::string describe() const override { return set_.describe(); }
  std::string format() const override { return set_.format(); }
  void verify() const { set_.verify(); }

 private:
  ShardSet set_;
  uint64_t seed_;
};
}  // namespace

std::unique_ptr<TokenSource> make_synthetic_source(uint64_t seed, int vocab_size) {
  return std::make_unique<SyntheticSource>(seed, vocab_size);
}

std::unique_ptr<TokenSource> make_file_source(const std::string& path, const std::string& dtype,
                                              uint64_t seed, int vocab_size, int seq_len,
                                              const std::string& format, const std::string& key,
                                              bool verify_full) {
  auto src = std::make_unique<FileSource>(path, format, dtype, seed, vocab_size, seq_len, key);
  if (verify_full) src->verify();
  return src;
}

std::unique_ptr<TokenSource> make_source(const DataCfg& d, uint64_t seed, int vocab_size,
                                         int seq_len, bool verify_full) {
  if (d.source == "synthetic") return make_synthetic_source(seed, vocab_size);
  if (d.source == "file") {
    if (d.path.empty()) throw UsageError("data.path: required when data.source=file");
    return make_file_source(d.path, d.dtype, seed, vocab_size, seq_len, d.format, "data.path",
                            verify_full);
  }
  throw UsageError("data.source: '" + d.source + "' is not valid; choose synthetic or file");
}

void check_windows(const TokenSource& src, int seq_len, uint64_t first, uint64_t count) {
  std::vector<int32_t> buf(size_t(seq_len) + 1);
  for (uint64_t i = 0; i < count; ++i) src.sample(first + i, seq_len, buf.data());
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
                  uint64_t(micro) * uint64_t(micro_batch_) * dp_ +
                  uint64_t(dp_rank_) * micro_batch_;
  for (int b = 0; b < micro_batch_; ++b) {
    src_->sample(base + uint64_t(b), seq_len_, buf.data());
    std::memcpy(&mb.tokens[size_t(b) * seq_len_], buf.data(), size_t(seq_len_) * 4);
    std::memcpy(&mb.targets[size_t(b) * seq_len_], buf.data() + 1, size_t(seq_len_) * 4);
  }
}
}  // namespace st

// Training data: synthetic tokens or a memory-mapped token file (uint16 or
// uint32, raw little-endian, optional JSON sidecar `<file>.json`). Sample i of
// the run is a pure function of (seed, i), so the global batch of a step is
// the same whatever the layout and rank count, and resuming needs only the
// number of samples consumed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace st {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Fills seq_len+1 tokens of global sample `index` into out.
  virtual void sample(uint64_t index, int seq_len, int32_t* out) const = 0;
  virtual std::string describe() const = 0;
};

// Synthetic: uniform tokens from a counter-based RNG.
std::unique_ptr<TokenSource> make_synthetic_source(uint64_t seed, int vocab_size);
// File: validates existence, size, dtype and token range; throws UsageError
// naming the file and what is wrong.
std::unique_ptr<TokenSource> make_file_source(const std::string& path, const std::string& dtype,
                                              uint64_t seed, int vocab_size, int seq_len);
std::unique_ptr<TokenSource> make_source(const DataCfg& d, uint64_t seed, int vocab_size,
                                         int seq_len);

// The batch one rank consumes in one micro-step: inputs and next-token targets.
struct MicroBatch {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;  // [B, T]
};

class DataLoader {
 public:
  // global_batch = micro_batch * grad_accum * dp; this rank reads the
  // micro-batches of its data-parallel index.
  DataLoader(std::unique_ptr<TokenSource> src, int seq_len, int micro_batch, int grad_accum,
             int dp, int dp_rank);
  // Micro-batch `micro` (0..grad_accum-1) of 1-based step `step`.
  void get(long step, int micro, MicroBatch& mb) const;
  int64_t global_batch() const { return int64_t(micro_batch_) * grad_accum_ * dp_; }
  uint64_t samples_consumed(long steps_done) const { return uint64_t(steps_done) * global_batch(); }
  const TokenSource& source() const { return *src_; }

 private:
  std::unique_ptr<TokenSource> src_;
  int seq_len_, micro_batch_, grad_accum_, dp_, dp_rank_;
};

uint64_t splitmix64(uint64_t& state);
}  // namespace st

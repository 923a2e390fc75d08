// Training data: synthetic tokens or memory-mapped token files (raw, llm.c or
// Megatron-LM shards; one file, a folder or a glob: shard_set.hpp). Sample i
// of the run is a pure function of (seed, i), so the global batch of a step
// is the same whatever the layout and rank count, and resuming needs only
// the number of samples consumed.
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
  // Fills seq_len+1 tokens of global sample `index` into out. A file source
  // throws UsageError (file and byte offset) for an id outside the vocabulary.
  virtual void sample(uint64_t index, int seq_len, int32_t* out) const = 0;
  virtual std::string describe() const = 0;
  // raw|llmc|megatron as read (data.format=auto resolved); "" for synthetic.
  virtual std::string format() const { return ""; }
};

// Synthetic: uniform tokens from a counter-based RNG.
std::unique_ptr<TokenSource> make_synthetic_source(uint64_t seed, int vocab_size);
// File(s): checks headers, sidecars and size (at least seq_len+2 tokens);
// throws UsageError naming the key, the file and what is wrong. Ids are
// checked as samples are read (check_windows). `key` names the config key in
// messages (data.path, or data.val_path for the validation split).
// verify_full (data.verify=full): also every id and index entry of every
// file, once, now (ShardSet::verify: every bad id with its shard and byte
// offset).
std::unique_ptr<TokenSource> make_file_source(const std::string& path, const std::string& dtype,
                                              uint64_t seed, int vocab_size, int seq_len,
                                              const std::string& format = "auto",
                                              const std::string& key = "data.path",
                                              bool verify_full = false);
// verify_full as above (the trainer passes data.verify=full on one rank).
std::unique_ptr<TokenSource> make_source(const DataCfg& d, uint64_t seed, int vocab_size,
                                         int seq_len, bool verify_full = false);
// Reads samples first..first+count-1 and discards them: throws the UsageError
// of the first bad id. Every rank checks the same samples, so every rank
// refuses together without a collective.
void check_windows(const TokenSource& src, int seq_len, uint64_t first, uint64_t count);

// The batch one rank consumes in one micro-step: inputs and next-token targets.
struct MicroBatch {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;  // [B, T]
};

class DataLoader {
 public:
  // global_batch = micro_batch * grad_accum * dp; this rank reads the
  // micro-batches of its data-parallel index.
  DataLoader(std::unique_ptr<TokenSource> src, int seq_len, int micro_batch, int grad_accum, int dp,
             int dp_rank);
  // Micro-batch `micro` (0..grad_accum-1) of 1-based step `step`.
  void get(long step, int micro, MicroBatch& mb) const;
  int64_t global_batch() const { return int64_t(micro_batch_) * grad_accum_ * dp_; }
  uint64_t samples_consumed(long steps_done) const { return uint64_t(steps_done) * global_batch(); }
  // Checks every sample of the global batch of `step` (all ranks', so all
  // ranks agree), before the step reads any: the ids of a corpus are checked
  // as it is used rather than scanned at start-up.
  void check_step(long step) const {
    check_windows(*src_, seq_len_, samples_consumed(step - 1), uint64_t(global_batch()));
  }
  const TokenSource& source() const { return *src_; }

 private:
  std::unique_ptr<TokenSource> src_;
  int seq_len_, micro_batch_, grad_accum_, dp_, dp_rank_;
};

uint64_t splitmix64(uint64_t& state);
}  // namespace st

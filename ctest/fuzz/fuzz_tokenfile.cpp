// Fuzz harness: token file headers (llm.c shards, Megatron-LM .idx/.bin
// pairs, raw files; lib/data/formats.cpp). Input: one byte choosing
// data.format (low 2 bits: auto, raw, llmc, megatron) and whether the path
// names the .bin or the prefix (bit 2), then the .idx bytes, "\n#--bin\n" and
// the .bin bytes (no separator: no .idx, the input is the .bin). Contract:
// opening either refuses with UsageError or gives a source whose samples are
// in range or refused with UsageError; never a crash, a hang or an id
// outside [0, vocab).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/data.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace st;
  if (size < 1) return 0;
  static const char* kFormats[] = {"auto", "raw", "llmc", "megatron"};
  const std::string format = kFormats[data[0] & 3];
  const bool prefix = data[0] & 4;
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  auto parts = fuzz::split(in, "\n#--bin\n", 2);
  const std::string base = fuzz::scratch() + "/t";
  std::error_code ec;
  std::filesystem::remove(base + ".idx", ec);
  if (parts.size() > 1) {
    fuzz::write(base + ".idx", parts[0]);
    fuzz::write(base + ".bin", parts[1]);
  } else {
    fuzz::write(base + ".bin", parts[0]);
  }
  const int vocab = 256, seq_len = 8;
  std::unique_ptr<TokenSource> src;
  try {
    src = make_file_source(prefix ? base : base + ".bin", "uint16", 99, vocab, seq_len, format);
  } catch (const UsageError&) {
    return 0;
  }
  std::vector<int32_t> out(seq_len + 1);
  for (uint64_t i = 0; i < 64; ++i) {
    try {
      src->sample(i * 7919, seq_len, out.data());
    } catch (const UsageError&) {
      continue;
    }
    for (int32_t t : out)
      if (t < 0 || t >= vocab) {
        std::fprintf(stderr, "token %d out of range [0, %d) was accepted\n", t, vocab);
        std::abort();
      }
  }
  return 0;
}

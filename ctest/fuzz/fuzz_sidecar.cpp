// Fuzz harness: a token file and its JSON sidecar (data.source=file).
// Input: the sidecar's JSON, then "\n#--tokens\n", then the token file's
// bytes; a sidecar part that starts with a tab asks for data.dtype=uint32
// (else uint16), so mismatches with the sidecar are tried too. Contract:
// make_file_source either refuses with UsageError or returns a source whose
// samples are in range (every token < vocab_size) or refused with
// UsageError (ids are checked as they are read), never a crash or a hang.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/data.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace st;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto parts = fuzz::split(in, "\n#--tokens\n", 2);
  const std::string path = fuzz::scratch() + "/tokens.bin";
  fuzz::write(path + ".json", parts[0]);
  fuzz::write(path, parts.size() > 1 ? parts[1] : std::string_view());
  const std::string dtype = !parts[0].empty() && parts[0][0] == '\t' ? "uint32" : "uint16";
  const int vocab = 256, seq_len = 8;
  std::unique_ptr<TokenSource> src;
  try {
    src = make_file_source(path, dtype, 1234, vocab, seq_len, "raw");
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

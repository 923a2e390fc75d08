// scaletrain-tokenize: turns text files into a byte-level token file (one
// token per byte, ids 0..255) that `data.source: file` memory-maps, plus a
// JSON sidecar (<out>.json) with dtype, vocabulary size, token count and
// sources, which the loader uses to detect truncated or mismatched files.
// --format raw writes the ids alone; --format llmc writes an llm.c shard (a
// header of 256 int32: magic, version, token count; docs/data.md).
//
//   scaletrain-tokenize -o data/corpus.bin [--dtype uint16|uint32] [--format raw|llmc] FILE...
#include <boost/program_options.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.hpp"
#include "core/util.hpp"
#include "data/formats.hpp"

namespace po = boost::program_options;

namespace {
// Writes the inputs' bytes as ids of `dtype` to `out` (through out.partial
// and a rename, so a failed run leaves no half file under the name), with
// the llm.c header first when `llmc`. Returns the token count.
uint64_t write_tokens(const std::string& out, const std::vector<std::string>& inputs,
                      const std::string& dtype, bool llmc) {
  std::string tmp = out + ".partial";
  std::ofstream os(tmp, std::ios::binary);
  if (!os) throw st::UsageError("cannot write '" + tmp + "'");
  // The llm.c header (dev/data/data_common.py write_datafile), rewritten with
  // the count once it is known.
  std::vector<int32_t> header(st::kLlmcHeaderInts, 0);
  header[0] = dtype == "uint16" ? st::kLlmcMagicU16 : st::kLlmcMagicU32;
  header[1] = dtype == "uint16" ? st::kLlmcVersionU16 : st::kLlmcVersionU32;
  if (llmc) os.write(reinterpret_cast<const char*>(header.data()), std::streamsize(1024));
  uint64_t n = 0;
  for (const auto& f : inputs) {
    std::string text = st::read_file(f);
    if (dtype == "uint16") {
      std::vector<uint16_t> ids(text.begin(), text.end());
      for (size_t i = 0; i < text.size(); ++i) ids[i] = uint16_t(uint8_t(text[i]));
      os.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));
    } else {
      std::vector<uint32_t> ids(text.size());
      for (size_t i = 0; i < text.size(); ++i) ids[i] = uint32_t(uint8_t(text[i]));
      os.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 4));
    }
    n += text.size();
  }
  if (llmc) {
    header[2] = int32_t(n);
    os.seekp(0);
    os.write(reinterpret_cast<const char*>(header.data()), std::streamsize(1024));
  }
  os.close();
  if (!os) throw st::Error("write to '" + tmp + "' failed");
  if (std::rename(tmp.c_str(), out.c_str()) != 0) throw st::Error("rename to '" + out + "' failed");
  return n;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    std::string out, dtype = "uint16", format = "raw";
    std::vector<std::string> inputs;
    po::options_description desc(
        "scaletrain-tokenize: text files -> byte-level token file (vocab 256)\nOptions");
    desc.add_options()("help,h", "show this help")(
        "out,o", po::value(&out)->required(),
        "output token file (a .json sidecar is written beside it)")(
        "dtype", po::value(&dtype)->default_value("uint16"), "token width: uint16 or uint32")(
        "format", po::value(&format)->default_value("raw"),
        "raw (ids only) or llmc (llm.c shard: 1024-byte header, then the ids)")(
        "input", po::value(&inputs)->multitoken(), "text files");
    po::positional_options_description pos;
    pos.add("input", -1);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n"
                << "When ids are checked: the trainer does not scan a token file at start-up.\n"
                   "Each id is checked against model.vocab_size when a sample first reads it\n"
                   "(the whole global batch of a step, before the step), and a bad one stops\n"
                   "the run with exit 2 naming the file and byte offset. An id that no sample\n"
                   "ever reads is never checked. data.verify=full reads every id once at\n"
                   "start-up and lists every bad one with its file and byte offset\n"
                   "(docs/data.md). This tool writes byte ids (0..255): any model.vocab_size\n"
                   ">= 256 reads them.\n";
      return 0;
    }
    po::notify(vm);
    if (dtype != "uint16" && dtype != "uint32")
      throw st::UsageError("--dtype: '" + dtype + "' is not valid; choose uint16 or uint32");
    if (format != "raw" && format != "llmc")
      throw st::UsageError("--format: '" + format + "' is not valid; choose raw or llmc");
    if (inputs.empty()) throw st::UsageError("no input files given");
    const bool llmc = format == "llmc";
    // llm.c's header counts tokens in an int32: its shards hold < 2^31.
    uint64_t in_bytes = 0;
    for (const auto& f : inputs) {
      std::error_code ec;
      const auto sz = std::filesystem::file_size(f, ec);
      if (!ec) in_bytes += uint64_t(sz);
    }
    if (llmc && in_bytes > uint64_t(INT32_MAX))
      throw st::UsageError("--format llmc: " + std::to_string(in_bytes) +
                           " tokens do not fit one llm.c shard (its header counts at most "
                           "2147483647); split the text into several shards");

    const uint64_t n = write_tokens(out, inputs, dtype, llmc);
    nlohmann::json side = {{"format", "scaletrain.tokens/1"},
                           {"tokenizer", "bytes"},
                           {"dtype", dtype},
                           {"vocab_size", 256},
                           {"n_tokens", n},
                           {"sources", inputs}};
    st::write_file_atomic(out + ".json", side.dump(2) + "\n");
    std::cout << "scaletrain-tokenize: wrote " << n << " tokens (" << format << ", " << dtype
              << ") to " << out << "\n";
    return 0;
  } catch (const po::error& e) {
    std::cerr << "scaletrain-tokenize: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const st::UsageError& e) {
    std::cerr << "scaletrain-tokenize: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "scaletrain-tokenize: " << e.what() << "\n";
    return 1;
  }
}

// scaletrain-convert and model.init_from against an independent Hugging Face
// Llama in PyTorch (ctest/convert/hf_llama_torch.py: rotate-half RoPE, its
// own safetensors reader and writer from the specification):
//  - export -> PyTorch: a trained checkpoint exported in fp32 gives PyTorch
//    the loss scaletrain computes on the next step's batch (<= 1e-5);
//  - round trip: checkpoint -> export -> model.init_from -> checkpoint holds
//    the same weights bit for bit (fp32, on 1 rank and under tp 2), and a
//    bf16 export holds them rounded to bf16 exactly;
//  - PyTorch -> import: a folder PyTorch wrote starts a scaletrain run at
//    PyTorch's loss (<= 1e-5) on 1 rank, tp 2 and dp 2 with ZeRO 3, and
//    bf16 with tied embeddings on 1 rank.
// The runs use fp32 compute (train.precision=fp32). Skipped, with the
// reason, when python3 or torch is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "../e2e/ckpt_util.hpp"
#include "../e2e/run_util.hpp"
#include "core/util.hpp"
#include "tensor/dtype.hpp"

using namespace st::test;
namespace fs = std::filesystem;

namespace {
constexpr int kSeed = 7, kSeq = 32;
// tiny (head_dim 16, 4 query and 2 kv heads: the q/k permutation is not the
// identity), shorter sequences, fp32.
const std::string kModel = " --config " + src_dir() + "/configs/models/tiny.yaml" +
                           " --set model.seq_len=" + std::to_string(kSeq) +
                           " --set train.precision=fp32 --set runtime.cpu_peak_gflops=1" +
                           " --set train.seed=" + std::to_string(kSeed);

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string convert_bin() {
  return (fs::path(bin()).parent_path() / "scaletrain-convert").string();
}

// Why the PyTorch reference cannot run here ("" when it can).
std::string python_missing() {
  const std::string py = env_or("SCALETRAIN_PYTHON", "");
  if (py.empty()) return "SCALETRAIN_PYTHON is not set (python3 not found at configure time)";
  if (std::system((quote(py) + " -c 'import torch, numpy' > /dev/null 2>&1").c_str()) != 0)
    return py + " cannot import torch and numpy (install python3-torch)";
  return "";
}

// The reference script's loss ("loss" or "write" mode; see its docstring).
double torch_loss(const std::string& args) {
  const std::string script = src_dir() + "/ctest/convert/hf_llama_torch.py";
  auto r =
      run_cmd(quote(env_or("SCALETRAIN_PYTHON", "python3")) + " " + quote(script) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto nl = r.output.rfind('{');
  if (nl == std::string::npos) return NAN;
  return nlohmann::json::parse(r.output.substr(nl))["loss"].get<double>();
}

std::vector<double> train(int ranks, const std::string& args, const std::string& out) {
  auto r = run_scaletrain(ranks, kModel + args + " --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_series(out, 0, "loss");
}

void export_ok(const std::string& from, const std::string& out, const std::string& dtype) {
  auto r = run_cmd(convert_bin() + " export --from " + from + " --out " + out + " --dtype " +
                   dtype + " --shard-mb 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::cout << r.output;
  // The size the dry run predicts is the size written.
  const auto at = r.output.find(" bytes in all (");
  ASSERT_NE(at, std::string::npos) << r.output;
  const auto start = r.output.rfind(' ', at - 1) + 1;
  const std::string written = r.output.substr(start, at - start);
  const auto p = at + std::string(" bytes in all (").size();
  const std::string predicted = r.output.substr(p, r.output.find(' ', p) - p);
  EXPECT_EQ(written, predicted) << r.output;
  uint64_t on_disk = 0;
  for (const auto& e : fs::directory_iterator(out)) on_disk += e.file_size();
  EXPECT_EQ(std::to_string(on_disk), written);
}

const std::string kStep1 = "/checkpoints/step_00000001", kStep2 = "/checkpoints/step_00000002";
}  // namespace

TEST(Convert, ExportMatchesTorchAndRoundTripsBitExact) {
  const std::string why = python_missing();
  const std::string d = fresh_dir("convert-export");
  // A: 3 steps, global batch 2; its step-2 checkpoint is exported, and its
  // step-3 loss is the loss of those weights on samples 4..5.
  const auto a = train(
      1, " --set train.steps=3 --set train.micro_batch=2 --set checkpoint.interval=2", d + "/a");
  ASSERT_EQ(a.size(), 3u);
  export_ok(d + "/a" + kStep2, d + "/fp32", "fp32");
  export_ok(d + "/a" + kStep2, d + "/bf16", "bf16");
  // Several shards and the index (0.1 MB per file for a 0.4 MB model).
  EXPECT_TRUE(fs::exists(d + "/fp32/model-00001-of-00005.safetensors"));
  EXPECT_TRUE(fs::exists(d + "/fp32/model.safetensors.index.json"));
  // `check` accepts the export for the run's model.
  const auto chk = run_cmd(convert_bin() + " check " + d + "/fp32" + kModel);
  EXPECT_EQ(chk.exit_code, 0) << chk.output;

  if (why.empty()) {
    const double ref =
        torch_loss("loss " + d + "/fp32 " + std::to_string(kSeed) + " 4 2 " + std::to_string(kSeq));
    std::cout << "export -> PyTorch: scaletrain step-3 loss " << a[2] << ", PyTorch " << ref
              << ", |diff| " << std::fabs(a[2] - ref) << "\n";
    EXPECT_LE(std::fabs(a[2] - ref), 1e-5);
  } else {
    std::cout << "PyTorch comparison skipped: " << why << "\n";
  }

  // Import with lr 0: the first checkpoint holds the imported weights.
  const std::string import = " --set optim.lr=0 --set train.steps=1 --set checkpoint.interval=1";
  const auto want = read_checkpoint(d + "/a" + kStep2, "params/");
  ASSERT_FALSE(want.empty());
  int k = 0;
  struct Case {
    std::string name;
    int ranks;
    std::string sets, folder;
    bool bf16;
  };
  for (const Case& c :
       {Case{"fp32, 1 rank", 1, " --set train.micro_batch=2", "/fp32", false},
        Case{"fp32, tp 2", 2, " --set parallel.tp=2 --set train.micro_batch=2", "/fp32", false},
        Case{"fp32, dp 2 ZeRO 3", 2,
             " --set parallel.dp=2 --set parallel.zero_stage=3 --set train.micro_batch=1", "/fp32",
             false},
        Case{"bf16, 1 rank", 1, " --set train.micro_batch=2", "/bf16", true}}) {
    const std::string out = d + "/import" + std::to_string(k++);
    train(c.ranks, import + c.sets + " --set model.init_from=" + d + c.folder, out);
    const auto got = read_checkpoint(out + kStep1, "params/");
    ASSERT_EQ(got.size(), want.size()) << c.name;
    size_t differ = 0, total = 0;
    for (const auto& [name, w] : want) {
      const std::vector<float>& g = got.at(name);
      ASSERT_EQ(g.size(), w.size()) << c.name << " " << name;
      for (size_t i = 0; i < w.size(); ++i) {
        const float e = c.bf16 ? st::round_bf16(w[i]) : w[i];
        differ += std::memcmp(&e, &g[i], 4) != 0;
      }
      total += w.size();
    }
    EXPECT_EQ(differ, 0u) << c.name << ": " << differ << " of " << total
                          << " weights differ after the round trip";
    std::cout << "round trip " << c.name << ": " << total << " weights, " << differ << " differ\n";
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

TEST(Convert, ImportFromTorchStartsAtTorchsLoss) {
  const std::string why = python_missing();
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string d = fresh_dir("convert-import");
  // The tiny shape, as Hugging Face's config.json spells it.
  auto cfg = [](bool tied) {
    return nlohmann::json{{"architectures", {"LlamaForCausalLM"}},
                          {"model_type", "llama"},
                          {"hidden_size", 64},
                          {"intermediate_size", 128},
                          {"num_attention_heads", 4},
                          {"num_key_value_heads", 2},
                          {"num_hidden_layers", 2},
                          {"rms_norm_eps", 1e-5},
                          {"rope_theta", 10000.0},
                          {"vocab_size", 256},
                          {"max_position_embeddings", kSeq},
                          {"tie_word_embeddings", tied},
                          {"torch_dtype", "float32"}}
        .dump();
  };
  // Global batch 4: samples 0..3 are step 1's.
  const std::string tail = " " + std::to_string(kSeed) + " 0 4 " + std::to_string(kSeq) + " ";
  const double ref32 = torch_loss("write " + d + "/hf32" + tail + quote(cfg(false)) + " F32 3");
  const double ref16 = torch_loss("write " + d + "/hf16" + tail + quote(cfg(true)) + " BF16 1");
  struct Case {
    std::string name;
    int ranks;
    std::string sets, folder;
    double ref;
  };
  const std::string one = " --set train.steps=1 --set checkpoint.interval=0";
  int k = 0;
  for (const Case& c :
       {Case{"fp32, 1 rank", 1, " --set train.micro_batch=4", "/hf32", ref32},
        Case{"fp32, tp 2", 2, " --set parallel.tp=2 --set train.micro_batch=4", "/hf32", ref32},
        Case{"fp32, dp 2 ZeRO 3", 2,
             " --set parallel.dp=2 --set parallel.zero_stage=3 --set train.micro_batch=2", "/hf32",
             ref32},
        Case{"bf16 tied, 1 rank", 1, " --set train.micro_batch=4", "/hf16", ref16}}) {
    const std::string out = d + "/run" + std::to_string(k++);
    const auto l = train(c.ranks, one + c.sets + " --set model.init_from=" + d + c.folder, out);
    ASSERT_EQ(l.size(), 1u) << c.name;
    std::cout << "PyTorch -> import, " << c.name << ": scaletrain first loss " << l[0]
              << ", PyTorch " << c.ref << ", |diff| " << std::fabs(l[0] - c.ref) << "\n";
    EXPECT_LE(std::fabs(l[0] - c.ref), 1e-5) << c.name;
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

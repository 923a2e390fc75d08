// lib/convert on its own: the safetensors writer and reader against the
// format's specification (byte layout, dtypes, every way a file can be
// damaged refused naming the file and the tensor), the q/k row permutation
// against Hugging Face's permute(), and a Hugging Face folder checked
// against a model config and read in slices.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "convert/hf_llama.hpp"
#include "convert/safetensors.hpp"
#include "core/error.hpp"
#include "tensor/dtype.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace st;

namespace {
std::string tmpdir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("st-safetensors-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void put(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A file of raw bytes: the 8-byte length, `header` as given, then `data`.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
  return s + header + data;
}

// The message of the UsageError `f` throws ("" if none).
std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Safetensors, WritesTheSpecifiedLayoutAndReadsItBack) {
  const std::string d = tmpdir("rt");
  std::vector<float> a = {1.f, -2.5f, 3.25f, 0.f, 1e-30f, -7.f};
  std::vector<uint16_t> b = {f32_to_bf16(1.f), f32_to_bf16(-0.5f), f32_to_bf16(3.f)};
  safetensors::write(d + "/x.safetensors",
                     {{"a", "F32", {2, 3}, a.data()}, {"b.w", "BF16", {3}, b.data()}},
                     {{"format", "pt"}});
  const std::string bytes = slurp(d + "/x.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  const json h = json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["a"]["data_offsets"], json({0, 24}));
  EXPECT_EQ(h["b.w"]["data_offsets"], json({24, 30}));
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  EXPECT_EQ(bytes.size(), 8 + n + 30);
  // Raw little-endian data right after the header.
  float first;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  EXPECT_EQ(first, 1.f);

  safetensors::File f(d + "/x.safetensors");
  ASSERT_NE(f.find("a"), nullptr);
  EXPECT_EQ(f.find("a")->shape, std::vector<int64_t>({2, 3}));
  std::vector<float> back(6), bb(3);
  safetensors::to_f32("F32", f.data(*f.find("a")), back.data(), 6);
  EXPECT_EQ(std::memcmp(back.data(), a.data(), 24), 0);
  safetensors::to_f32("BF16", f.data(*f.find("b.w")), bb.data(), 3);
  EXPECT_EQ(bb, std::vector<float>({1.f, -0.5f, 3.f}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  fs::remove_all(d);
}

TEST(Safetensors, WidensHalfPrecision) {
  const uint16_t h[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0x3555};
  std::vector<float> f(7);
  safetensors::to_f32("F16", reinterpret_cast<const uint8_t*>(h), f.data(), 7);
  EXPECT_EQ(f[0], 1.f);
  EXPECT_EQ(f[1], -2.f);
  EXPECT_EQ(f[2], 65504.f);
  EXPECT_EQ(f[3], std::ldexp(1.f, -24));
  EXPECT_TRUE(f[4] == 0.f && std::signbit(f[4]));
  EXPECT_TRUE(std::isinf(f[5]));
  EXPECT_NEAR(f[6], 1.f / 3, 1e-3);
}

TEST(Safetensors, RefusesDamagedFilesNamingFileAndTensor) {
  const std::string d = tmpdir("bad");
  const std::string p = d + "/m.safetensors";
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Row {
    std::string name, bytes, expect;
  };
  const std::vector<Row> rows = {
      {"empty", "", "truncated"},
      {"short length", std::string(5, '\0'), "truncated"},
      {"header past the end", raw_file(ok, "").substr(0, 20), "truncated: the header length"},
      {"huge length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8),
       "exceeds the format's limit"},
      {"not JSON", raw_file("{nope", ""), "not a JSON object"},
      {"data truncated", raw_file(ok, std::string(4, '\0')), "tensor 'w': truncated"},
      {"unknown dtype",
       raw_file(R"({"w":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "tensor 'w': unknown dtype 'F12'"},
      {"offsets disagree with shape",
       raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "tensor 'w': data_offsets [0,8] span 8 bytes but F32 [3] needs 12"},
      {"negative size",
       raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "tensor 'w': shape"},
      {"gap",
       raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                std::string(12, '\0')),
       "tensor 'w' starts at byte 4"},
      {"trailing bytes", raw_file(ok, std::string(12, '\0')), "4 bytes after the last tensor"},
      {"bad metadata", raw_file(R"({"__metadata__":{"a":1}})", ""), "__metadata__.a"},
  };
  for (const Row& r : rows) {
    put(p, r.bytes);
    const std::string msg = usage_error([&] { safetensors::File f(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << r.name << ": " << msg;
    EXPECT_NE(msg.find(r.expect), std::string::npos) << r.name << ": " << msg;
  }
  put(p, raw_file(ok, std::string(8, '\0')));
  EXPECT_NO_THROW(safetensors::File f(p));
  fs::remove_all(d);
}

// Hugging Face's permute(w, n_heads): w.view(n_heads, dim1/n_heads/2, 2,
// dim2).transpose(1, 2).reshape(dim1, dim2): its row (h, j, i) is row
// (h, i, j) of the input.
TEST(HfLlama, QkRowsFollowHuggingFacePermute) {
  const int64_t heads = 3, hd = 8;
  std::set<int64_t> seen;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t meta = h * hd + i * 2 + j, hf = h * hd + j * (hd / 2) + i;
        EXPECT_EQ(hf::hf_row(meta, hd), hf);
        seen.insert(hf::hf_row(meta, hd));
      }
  EXPECT_EQ(seen.size(), size_t(heads * hd));
}

namespace {
ModelCfg small() {
  ModelCfg m;
  m.n_layers = 1, m.d_model = 8, m.n_heads = 2, m.n_kv_heads = 1, m.ffn_hidden = 12;
  m.vocab_size = 10, m.seq_len = 4;
  return m;
}

// A Hugging Face folder of `m` whose every element is a function of the
// tensor's index and the element's, in fp32.
void write_folder(const std::string& d, const ModelCfg& m,
                  const std::function<void(json&)>& edit_cfg = nullptr,
                  const std::function<void(std::vector<safetensors::OutTensor>&)>& edit = nullptr) {
  fs::create_directories(d);
  static std::vector<std::vector<float>> keep;
  keep.clear();
  std::vector<safetensors::OutTensor> t;
  int k = 0;
  for (const hf::Weight& w : hf::weights(m)) {
    int64_t n = 1;
    for (int64_t s : w.shape) n *= s;
    keep.emplace_back(size_t(n));
    for (int64_t i = 0; i < n; ++i) keep.back()[size_t(i)] = float(k * 1000 + i);
    t.push_back({w.hf, "F32", w.shape, keep.back().data()});
    ++k;
  }
  if (edit) edit(t);
  safetensors::write(d + "/model.safetensors", t, {});
  json c = hf::config_json(m, "float32");
  if (edit_cfg) edit_cfg(c);
  put(d + "/config.json", c.dump());
}
}  // namespace

TEST(HfLlama, FolderReadsSlicesThroughThePermutation) {
  const std::string d = tmpdir("folder");
  const ModelCfg m = small();
  write_folder(d, m);
  hf::Folder f(d, m);
  // Rows 2..5, columns 3..6 of wq (index 2 in the weight order), hd = 4.
  std::vector<float> box(4 * 3);
  std::vector<ShardView> want = {
      {"params/layers.0.attention.wq.weight", {8, 8}, {2, 3}, {4, 3}, box.data()}};
  f.read(want);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(box[size_t(r * 3 + c)], float(2 * 1000 + hf::hf_row(2 + r, 4) * 8 + 3 + c));
  std::vector<float> norm(3);
  std::vector<ShardView> n = {{"layers.0.ffn_norm.weight", {8}, {5}, {3}, norm.data()}};
  f.read(n);
  EXPECT_EQ(norm, std::vector<float>({6005.f, 6006.f, 6007.f}));
  fs::remove_all(d);
}

TEST(HfLlama, FolderRefusesAnotherModelNamingFileAndTensor) {
  const std::string d = tmpdir("folderbad");
  const ModelCfg m = small();
  struct Row {
    std::string name;
    std::function<void(json&)> cfg;
    std::function<void(std::vector<safetensors::OutTensor>&)> tensors;
    std::string expect;
  };
  static std::vector<int32_t> ints(80);
  const std::vector<Row> rows = {
      {"hidden size", [](json& c) { c["hidden_size"] = 16; }, nullptr,
       "config.json': hidden_size is 16 but model.d_model is 8"},
      {"layers", [](json& c) { c["num_hidden_layers"] = 2; }, nullptr,
       "num_hidden_layers is 2 but model.n_layers is 1"},
      {"rope theta", [](json& c) { c["rope_theta"] = 500000.0; }, nullptr,
       "rope_theta is 500000 but model.rope_theta is 10000"},
      {"rope scaling",
       [](json& c) {
         c["rope_scaling"] = {{"rope_type", "llama3"}};
       },
       nullptr, "rope_scaling"},
      {"missing tensor", nullptr,
       [](std::vector<safetensors::OutTensor>& t) { t.erase(t.begin() + 3); },
       "tensor 'model.layers.0.self_attn.k_proj.weight' (layers.0.attention.wk.weight here) is "
       "missing"},
      {"wrong shape", nullptr, [](std::vector<safetensors::OutTensor>& t) { t[1].shape = {4}; },
       "tensor 'model.layers.0.input_layernorm.weight' has shape [4] but the configured model "
       "expects [8]"},
      {"wrong dtype", nullptr,
       [](std::vector<safetensors::OutTensor>& t) {
         t[0].dtype = "I32";
         t[0].data = ints.data();
       },
       "tensor 'model.embed_tokens.weight' has dtype I32, expected F32, BF16 or F16"},
      {"unknown tensor", nullptr,
       [](std::vector<safetensors::OutTensor>& t) {
         t.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {2}, ints.data()});
       },
       "holds tensor 'model.layers.0.self_attn.q_proj.bias'"},
  };
  for (const Row& r : rows) {
    fs::remove_all(d);
    write_folder(d, m, r.cfg, r.tensors);
    const std::string msg = usage_error([&] { hf::Folder f(d, m); });
    EXPECT_NE(msg.find(d), std::string::npos) << r.name << ": " << msg;
    EXPECT_NE(msg.find(r.expect), std::string::npos) << r.name << ": " << msg;
  }
  fs::remove_all(d);
  fs::create_directories(d);
  EXPECT_NE(usage_error([&] { hf::Folder f(d, m); }).find("config.json' is missing"),
            std::string::npos);
  fs::remove_all(d);
}

TEST(HfLlama, ExportSizeIsTheFilesBytes) {
  // The size the dry run states: headers + data of every shard + index + config.
  ModelCfg m = small();
  const auto plan = hf::plan_shards(m, "BF16", 200);
  EXPECT_GT(plan.size(), 1u);
  EXPECT_EQ(plan.front().file, "model-00001-of-" +
                                   std::string(5 - std::to_string(plan.size()).size(), '0') +
                                   std::to_string(plan.size()) + ".safetensors");
  EXPECT_EQ(hf::plan_shards(m, "F32", uint64_t(1) << 40).front().file, "model.safetensors");
  uint64_t data = 0;
  for (const auto& s : plan) data += s.data_bytes;
  EXPECT_EQ(data,
            uint64_t(2 * (2 * 10 * 8 + (2 * 8 + 8 * 8 + 2 * 8 * 4 + 8 * 8 + 3 * 8 * 12) + 8)));
  EXPECT_GT(hf::export_bytes(m, "BF16", 200), data);
}

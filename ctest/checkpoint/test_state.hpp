// Test fixtures for the checkpoint tests: a small sharded state whose every
// element has a known value (from tensor, global flat index and step), built
// for any rank of any world size under two different layouts ("save" and
// "load"), so a load can be compared bitwise against the formula.
#pragma once
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace st::test {

// A new empty folder under the temp directory ("" if none could be made).
inline std::string fresh_dir(const std::string& tag) {
  std::string t =
      (std::filesystem::temp_directory_path() / ("st_ckpt_" + tag + "_XXXXXX")).string();
  if (!mkdtemp(t.data())) return "";
  return t;
}

// Runs argv (argv[0] a path), returns the wait status.
inline int run(std::vector<std::string> args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> a;
    for (auto& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

struct Owned {
  ShardView v;
  std::vector<float> buf;
};

// Element i of tensor `t` at `step`: distinct, exactly representable values.
inline float value(int t, int64_t flat, long step) {
  uint32_t h = uint32_t((t * 7919 + flat * 31 + step * 1009) % 1000003);
  return float(h) * 0.25f + float(t);
}

// [off, off+len) of part i of n elements split `parts` ways; `front` puts the
// remainder on the first parts, else on the last.
inline std::pair<int64_t, int64_t> split(int64_t n, int parts, int i, bool front) {
  int64_t base = n / parts, rem = n % parts;
  int j = front ? i : parts - 1 - i;
  int64_t len = base + (j < rem ? 1 : 0);
  int64_t off = 0;
  for (int k = 0; k < i; ++k) {
    int jk = front ? k : parts - 1 - k;
    off += base + (jk < rem ? 1 : 0);
  }
  return {off, len};
}

inline int64_t global_flat(const ShardView& v, int64_t local) {
  std::vector<int64_t> idx(v.shape.size());
  for (size_t i = v.shape.size(); i-- > 0;) {
    idx[i] = local % v.shape[i];
    local /= v.shape[i];
  }
  int64_t f = 0;
  for (size_t i = 0; i < v.shape.size(); ++i) f = f * v.global_shape[i] + idx[i] + v.offset[i];
  return f;
}

inline Owned make(const std::string& name, std::vector<int64_t> gs, std::vector<int64_t> off,
                  std::vector<int64_t> shape) {
  Owned o;
  o.v.name = name;
  o.v.global_shape = std::move(gs);
  o.v.offset = std::move(off);
  o.v.shape = std::move(shape);
  int64_t n = 1;
  for (auto d : o.v.shape) n *= d;
  o.buf.assign(size_t(n), -1.0f);
  return o;
}

// Tensor ids and names. T4 is saved as a ZeRO-style flat 1-D [48] and loaded
// as [8, 6]; T1 the other way round.
inline const char* kNames[] = {"", "params/layers.0.attention.wq.weight", "exp_avg/flat_bucket.0",
                               "params/layers.0.feed_forward.w2.weight",
                               "exp_avg_sq/layers.0.attention.wq.weight"};

// save=true: rows of T1 split W ways, T2 flat split, T3 split by columns,
// T4 flat [48] split. save=false (load layout): T1 as flat [48], T2 split with
// the remainder at the end, T3 by rows, T4 as [8, 6] rows.
inline std::vector<Owned> layout(int world, int r, bool save) {
  std::vector<Owned> v;
  if (save) {
    auto [o1, l1] = split(8, world, r, true);
    v.push_back(make(kNames[1], {8, 6}, {o1, 0}, {l1, 6}));
    auto [o2, l2] = split(30, world, r, true);
    v.push_back(make(kNames[2], {30}, {o2}, {l2}));
    auto [o3, l3] = split(10, world, r, true);
    v.push_back(make(kNames[3], {4, 10}, {0, o3}, {4, l3}));
    auto [o4, l4] = split(48, world, r, true);
    v.push_back(make(kNames[4], {48}, {o4}, {l4}));
  } else {
    auto [o1, l1] = split(48, world, r, false);
    v.push_back(make(kNames[1], {48}, {o1}, {l1}));
    auto [o2, l2] = split(30, world, r, false);
    v.push_back(make(kNames[2], {30}, {o2}, {l2}));
    auto [o3, l3] = split(4, world, r, false);
    v.push_back(make(kNames[3], {4, 10}, {o3, 0}, {l3, 10}));
    auto [o4, l4] = split(8, world, r, false);
    v.push_back(make(kNames[4], {8, 6}, {o4, 0}, {l4, 6}));
  }
  for (auto& o : v) o.v.data = o.buf.data();
  return v;
}

inline void fill(std::vector<Owned>& v, long step) {
  for (size_t t = 0; t < v.size(); ++t)
    for (size_t i = 0; i < v[t].buf.size(); ++i)
      v[t].buf[i] = value(int(t + 1), global_flat(v[t].v, int64_t(i)), step);
}

// Number of elements that differ bitwise from the formula.
inline int64_t mismatches(const std::vector<Owned>& v, long step) {
  int64_t bad = 0;
  for (size_t t = 0; t < v.size(); ++t)
    for (size_t i = 0; i < v[t].buf.size(); ++i) {
      float want = value(int(t + 1), global_flat(v[t].v, int64_t(i)), step);
      bad += std::memcmp(&want, &v[t].buf[i], sizeof(float)) != 0;
    }
  return bad;
}

inline CkptState state_of(std::vector<Owned>& v, long step, int rank) {
  CkptState s;
  for (auto& o : v) s.tensors.push_back(o.v);
  s.scalars = {{"step", step}, {"rank", rank}, {"lr_pos", step * 2}};
  s.rng = {uint8_t(rank), uint8_t(step), 42, 7};
  return s;
}

inline std::vector<ShardView> views(std::vector<Owned>& v) {
  std::vector<ShardView> out;
  for (auto& o : v) out.push_back(o.v);
  return out;
}

}  // namespace st::test

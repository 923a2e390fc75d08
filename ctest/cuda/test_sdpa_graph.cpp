// The cuDNN fused-SDPA graph description (label cuda-host), recorded on a
// CPU: every tensor bound at execution addresses exactly the element of
// the buffer the model passes ([B,T,H,hd] bf16 token-major, lse [B,H,T]),
// every matmul's operand shapes agree (m x k times k x n, kv heads
// broadcast over their query-head group), every virtual tensor is written
// once before it is read, and the op list is the pinned lowering: the
// composite graphs of cudnn-frontend v1.23.0 (commit 3929da2e, see
// kernels/cuda/host/sdpa_graph.hpp), with the version branches of
// sdpa_rules.hpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "kernels/cuda/host/sdpa_graph.hpp"
#include "kernels/cuda/host/sdpa_rules.hpp"

namespace {
using namespace st::cuda_host;

int64_t at(const Dims4& stride, const Dims4& idx) {
  int64_t o = 0;
  for (int i = 0; i < 4; ++i) o += stride[size_t(i)] * idx[size_t(i)];
  return o;
}

const GTensor& by_uid(const RecordingSink& r, int64_t uid) {
  for (const auto& t : r.tensors)
    if (t.uid == uid) return t;
  static GTensor none;
  ADD_FAILURE() << "no tensor with uid " << uid;
  return none;
}

// Element (b, h, t, d) of a [B,T,H,hd] buffer.
int64_t bshd(int64_t T, int64_t H, int64_t hd, int64_t b, int64_t h, int64_t t, int64_t d) {
  return ((b * T + t) * H + h) * hd + d;
}

struct Shape {
  int64_t B, T, Hq, Hkv, hd;
};

void check_io(const RecordingSink& r, const Shape& s, bool bwd, bool dq_acc = true) {
  const auto [B, T, Hq, Hkv, hd] = s;
  // Q, O (and dO, dQ): dims [B,Hq,T,hd] over [B,T,Hq,hd] memory.
  std::vector<int64_t> qlike = {kUidQ, kUidO};
  if (bwd) qlike.insert(qlike.end(), {kUidDO, kUidDQ});
  for (int64_t uid : qlike) {
    const GTensor& t = by_uid(r, uid);
    EXPECT_EQ(t.dim, (Dims4{B, Hq, T, hd})) << uid;
    EXPECT_FALSE(t.is_virtual);
    EXPECT_EQ(t.type, GType::BF16);
    for (int64_t b : {int64_t(0), B - 1})
      for (int64_t h : {int64_t(0), Hq - 1})
        for (int64_t tt : {int64_t(0), T - 1})
          for (int64_t d : {int64_t(0), hd - 1})
            EXPECT_EQ(at(t.stride, {b, h, tt, d}), bshd(T, Hq, hd, b, h, tt, d)) << uid;
  }
  // K (and V in the backward) as the transposed operand [B,Hkv,hd,T].
  std::vector<int64_t> kt = {kUidK};
  if (bwd) kt.push_back(kUidV);
  for (int64_t uid : kt) {
    const GTensor& t = by_uid(r, uid);
    EXPECT_EQ(t.dim, (Dims4{B, Hkv, hd, T})) << uid;
    EXPECT_EQ(at(t.stride, {B - 1, Hkv - 1, hd - 1, T - 1}),
              bshd(T, Hkv, hd, B - 1, Hkv - 1, T - 1, hd - 1));
    EXPECT_EQ(at(t.stride, {0, 1 % Hkv, 3 % hd, 2 % T}),
              bshd(T, Hkv, hd, 0, 1 % Hkv, 2 % T, 3 % hd));
  }
  if (!bwd) {
    const GTensor& v = by_uid(r, kUidV);
    EXPECT_EQ(v.dim, (Dims4{B, Hkv, T, hd}));
    EXPECT_EQ(at(v.stride, {B - 1, Hkv - 1, T - 1, 1}), bshd(T, Hkv, hd, B - 1, Hkv - 1, T - 1, 1));
  } else {
    for (int64_t uid : {kUidDK, kUidDV}) {
      const GTensor& t = by_uid(r, uid);
      EXPECT_EQ(t.dim, (Dims4{B, Hkv, T, hd}));
      EXPECT_EQ(at(t.stride, {B - 1, 0, T - 1, hd - 1}), bshd(T, Hkv, hd, B - 1, 0, T - 1, hd - 1));
    }
    // The frontend's workspace tensors: fp32, packed, bound by the caller.
    if (dq_acc) {
      const GTensor& acc = by_uid(r, kUidDQAcc);
      EXPECT_FALSE(acc.is_virtual);
      EXPECT_EQ(acc.type, GType::F32);
      EXPECT_EQ(acc.dim, (Dims4{B, Hq, T, hd}));
      EXPECT_EQ(acc.stride, (Dims4{Hq * T * hd, T * hd, hd, 1}));
    }
    const GTensor& sum = by_uid(r, kUidSoftmaxSum);
    EXPECT_FALSE(sum.is_virtual);
    EXPECT_EQ(sum.type, GType::F32);
    EXPECT_EQ(sum.dim, (Dims4{B, Hq, T, 1}));
    EXPECT_EQ(sum.stride, (Dims4{Hq * T, T, 1, 1}));
  }
  // lse: [B,Hq,T,1] over the model's [B,Hq,T] fp32 buffer.
  const GTensor& st = by_uid(r, kUidStats);
  EXPECT_EQ(st.dim, (Dims4{B, Hq, T, 1}));
  EXPECT_EQ(st.type, GType::F32);
  EXPECT_EQ(at(st.stride, {B - 1, Hq - 1, T - 1, 0}), ((B - 1) * Hq + Hq - 1) * T + T - 1);
  EXPECT_TRUE(by_uid(r, kUidScale).by_value);
}

// Matmul shapes and single assignment of virtual tensors.
void check_structure(const RecordingSink& r) {
  std::set<int> written;
  for (size_t i = 0; i < r.tensors.size(); ++i)
    if (!r.tensors[i].is_virtual) written.insert(int(i));
  std::map<int, int> writes;
  for (const auto& op : r.ops) {
    for (int in : op.in)
      EXPECT_TRUE(written.count(in)) << op.kind << " reads tensor uid " << r.tensors[size_t(in)].uid
                                     << " before it is written";
    if (r.tensors[size_t(op.out)].is_virtual) {
      EXPECT_EQ(++writes[op.out], 1) << op.kind;
    }
    written.insert(op.out);
    if (op.kind == "matmul") {
      const Dims4 &a = r.tensors[size_t(op.in[0])].dim, &b = r.tensors[size_t(op.in[1])].dim,
                  &c = r.tensors[size_t(op.out)].dim;
      EXPECT_EQ(a[3], b[2]) << "inner dimensions";
      EXPECT_EQ(c[2], a[2]);
      EXPECT_EQ(c[3], b[3]);
      EXPECT_EQ(c[1] % b[1], 0) << "heads broadcast by group";
      EXPECT_EQ(c[1], std::max(a[1], b[1]));
    }
  }
}

const std::vector<Shape> kShapes = {{2, 16, 4, 2, 8}, {1, 64, 8, 8, 64}, {3, 5, 6, 1, 16}};

TEST(SdpaGraph, ForwardTensorsMatchTheBuffersAndTheLowering) {
  for (const Shape& s : kShapes) {
    RecordingSink r;
    describe_sdpa(r, false, s.B, s.T, s.Hq, s.Hkv, s.hd);
    check_io(r, s, false);
    check_structure(r);
    EXPECT_EQ(r.kinds(), (std::vector<std::string>{"matmul", "pw_mul",  // S * scale
                                                   "pw_gen_index", "pw_gen_index", "pw_cmp_ge",
                                                   "pw_select",  // causal
                                                   "reduce_max", "pw_sub", "pw_exp", "reduce_add",
                                                   "pw_log", "pw_add", "pw_div", "matmul"}));
    EXPECT_EQ(r.ops[2].axis, 2);                                 // row index
    EXPECT_EQ(r.ops[3].axis, 3);                                 // column index
    EXPECT_EQ(r.tensors[size_t(r.ops[11].out)].uid, kUidStats);  // lse = max + log(sum)
    EXPECT_EQ(r.tensors[size_t(r.ops.back().out)].uid, kUidO);
  }
}

// The index of the first op of `kind` reading tensor uid `uid`, or -1.
int first_reader(const RecordingSink& r, const std::string& kind, int64_t uid) {
  for (size_t i = 0; i < r.ops.size(); ++i)
    if (r.ops[i].kind == kind)
      for (int in : r.ops[i].in)
        if (r.tensors[size_t(in)].uid == uid) return int(i);
  return -1;
}

TEST(SdpaGraph, BackwardTensorsMatchTheBuffersAndTheLowering) {
  for (const Shape& s : kShapes) {
    RecordingSink r;
    describe_sdpa(r, true, s.B, s.T, s.Hq, s.Hkv, s.hd);
    check_io(r, s, true);
    check_structure(r);
    std::vector<std::string> want = {"pw_mul",       "reduce_add",   "pw_mul",  // softmax_sum
                                     "matmul",       "pw_mul",       "pw_sub",  // S * scale - lse
                                     "pw_gen_index", "pw_gen_index", "pw_cmp_ge", "pw_select",
                                     "pw_exp",                   // P
                                     "reshape",      "matmul"};  // dV
    if (s.Hq != s.Hkv) want.push_back("reduce_add");
    for (const char* k : {"matmul", "pw_sub", "pw_mul", "pw_mul", "reshape", "matmul"})
      want.push_back(k);  // dS, dK
    if (s.Hq != s.Hkv) want.push_back("reduce_add");
    for (const char* k : {"reshape", "matmul", "pw_identity"}) want.push_back(k);  // dQ
    EXPECT_EQ(r.kinds(), want) << "Hq=" << s.Hq << " Hkv=" << s.Hkv;
    EXPECT_EQ(r.tensors[size_t(r.ops.back().out)].uid, kUidDQ);
    // softmax_sum is written by the * 1 (the only use of the one scalar) and
    // read by the dP subtraction; the mask comes after the stats.
    EXPECT_EQ(r.tensors[size_t(r.ops[2].out)].uid, kUidSoftmaxSum);
    EXPECT_EQ(first_reader(r, "pw_mul", kUidOne), 2);
    int ones = 0;
    for (const auto& op : r.ops)
      for (int in : op.in) ones += r.tensors[size_t(in)].uid == kUidOne;
    EXPECT_EQ(ones, 1) << "no dP * 1";
    EXPECT_EQ(first_reader(r, "pw_sub", kUidStats), 5);
    EXPECT_EQ(r.ops[6].in[0], r.ops[5].out) << "the row index is generated over S - lse";
    EXPECT_EQ(r.ops[9].in[0], r.ops[5].out) << "the select masks S - lse";
    EXPECT_GT(first_reader(r, "pw_sub", kUidSoftmaxSum), 9);
    // The dQ matmul writes the fp32 accumulator, the identity casts it.
    EXPECT_EQ(r.tensors[size_t(r.ops[r.ops.size() - 2].out)].uid, kUidDQAcc);
  }
}

// The deterministic backward (the frontend's dP-workspace lowering): the
// same graph up to dQ, which the dS K matmul writes straight, with no fp32
// accumulator tensor at all.
TEST(SdpaGraph, DeterministicBackwardWritesDqWithoutAnAccumulator) {
  for (const Shape& s : kShapes) {
    RecordingSink det, acc;
    describe_sdpa(det, true, s.B, s.T, s.Hq, s.Hkv, s.hd, true);
    describe_sdpa(acc, true, s.B, s.T, s.Hq, s.Hkv, s.hd, false);
    check_io(det, s, true, false);
    check_structure(det);
    for (const GTensor& t : det.tensors) EXPECT_NE(t.uid, kUidDQAcc);
    std::vector<std::string> want = acc.kinds();
    want.pop_back();  // no identity cast
    EXPECT_EQ(det.kinds(), want);
    EXPECT_EQ(det.ops.back().kind, "matmul");
    EXPECT_EQ(det.tensors[size_t(det.ops.back().out)].uid, kUidDQ);
  }
}

TEST(SdpaRules, DeterministicBackwardWhereTheFrontendHasOne) {
  EXPECT_EQ(cudnn_deterministic_bwd_refuses(91900, 9), "");  // Hopper: dP workspace
  EXPECT_EQ(cudnn_deterministic_bwd_refuses(90000, 9), "");
  EXPECT_NE(cudnn_deterministic_bwd_refuses(91700, 10).find("9.18.0"), std::string::npos);
  EXPECT_NE(cudnn_deterministic_bwd_refuses(91900, 10).find("knob"), std::string::npos);
  EXPECT_NE(cudnn_deterministic_bwd_refuses(91900, 8).find("sm_8x"), std::string::npos);
  EXPECT_NE(cudnn_deterministic_bwd_refuses(91900, 12), "");
}

TEST(SdpaRules, MaskValueAndAccumulatorFollowTheCudnnVersion) {
  EXPECT_EQ(sdpa_mask_value(90400), std::numeric_limits<float>::lowest());
  EXPECT_EQ(sdpa_mask_value(90902), std::numeric_limits<float>::lowest());
  EXPECT_TRUE(std::isinf(sdpa_mask_value(91000)) && sdpa_mask_value(91000) < 0);
  EXPECT_TRUE(std::isinf(sdpa_mask_value(91900)) && sdpa_mask_value(91900) < 0);
  EXPECT_TRUE(sdpa_zero_dq_accum(90000));
  EXPECT_TRUE(sdpa_zero_dq_accum(90501));
  EXPECT_FALSE(sdpa_zero_dq_accum(90600));
  EXPECT_FALSE(sdpa_zero_dq_accum(91900));
  EXPECT_EQ(cudnn_version_name(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_name(91002), "9.10.2");
}

TEST(SdpaRules, RefusesWhatTheFrontendRefuses) {
  EXPECT_EQ(cudnn_sdpa_refuses(91900, 9, 4096, 128), "");
  EXPECT_EQ(cudnn_sdpa_refuses(91900, 9, 4096, 256), "");  // Hopper takes up to 256
  EXPECT_NE(cudnn_sdpa_refuses(91900, 10, 4096, 256).find("at most 128 on sm_10x"),
            std::string::npos);
  EXPECT_NE(cudnn_sdpa_refuses(91900, 8, 4096, 160).find("at most 128"), std::string::npos);
  EXPECT_NE(cudnn_sdpa_refuses(91900, 9, 4096, 264).find("at most 256"), std::string::npos);
  EXPECT_NE(cudnn_sdpa_refuses(91900, 9, 4096, 60).find("multiple of 8"), std::string::npos);
  EXPECT_NE(cudnn_sdpa_refuses(91000, 9, 4096, 128).find("9.10.0"), std::string::npos);
  EXPECT_NE(cudnn_sdpa_refuses(91001, 9, 4096, 128).find("9.10.1"), std::string::npos);
  EXPECT_EQ(cudnn_sdpa_refuses(91002, 9, 4096, 128), "");
  EXPECT_NE(cudnn_sdpa_refuses(91900, 9, 1, 128).find("sequence length 1"), std::string::npos);
}
}  // namespace

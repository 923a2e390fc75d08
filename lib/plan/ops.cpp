// Implementation of ops.hpp. The order and shapes of the calls follow
// lib/model/block.cpp (block forward, recompute, backward), stage.cpp (the
// embedding and the head) and ring_attention.cpp (cp > 1).
#include "plan/ops.hpp"

#include <sstream>

#include "core/error.hpp"
#include "core/util.hpp"
#include "plan/layout.hpp"

namespace st::plan {
namespace {
struct KindInfo {
  OpKind kind;
  const char* name;
  int dims;
};
constexpr KindInfo kKinds[] = {
    {OpKind::Gemm, "gemm", 3},
    {OpKind::AttnFwd, "attn_fwd", 6},
    {OpKind::AttnBwd, "attn_bwd", 6},
    {OpKind::NormFwd, "norm_fwd", 2},
    {OpKind::NormBwd, "norm_bwd", 2},
    {OpKind::RopeFwd, "rope_fwd", 3},
    {OpKind::RopeBwd, "rope_bwd", 3},
    {OpKind::SwigluFwd, "swiglu_fwd", 1},
    {OpKind::SwigluBwd, "swiglu_bwd", 1},
    {OpKind::Add, "add", 1},
    {OpKind::Copy, "copy", 1},
    {OpKind::CeFwd, "ce_fwd", 2},
    {OpKind::CeBwd, "ce_bwd", 2},
    {OpKind::EmbedFwd, "embed_fwd", 2},
    {OpKind::EmbedBwd, "embed_bwd", 2},
    {OpKind::Adam, "adam", 1},
    {OpKind::Alloc, "alloc", 1},
};
const KindInfo& info(OpKind k) {
  for (const auto& i : kKinds)
    if (i.kind == k) return i;
  ST_CHECK(false, "unknown op kind");
}

Op make(OpKind k, std::initializer_list<int64_t> dims, bool ta = false, bool tb = false) {
  Op o;
  o.kind = k;
  int i = 0;
  for (int64_t v : dims) o.s[i++] = v;
  o.ta = ta;
  o.tb = tb;
  return o;
}
// y[N, out] = x[N, in] W^T and its two gradients (block.cpp linear_*).
Op lin_fwd(int64_t N, int64_t out, int64_t in) {
  return make(OpKind::Gemm, {N, out, in}, false, true);
}
Op lin_bwd_w(int64_t N, int64_t out, int64_t in) {
  return make(OpKind::Gemm, {out, in, N}, true, false);
}
Op lin_bwd_x(int64_t N, int64_t out, int64_t in) { return make(OpKind::Gemm, {N, in, out}); }
}  // namespace

const char* op_name(OpKind k) { return info(k).name; }

std::string Op::key() const {
  const KindInfo& k = info(kind);
  std::string s = k.name;
  for (int i = 0; i < k.dims; ++i) s += (i ? "x" : " ") + std::to_string(this->s[i]);
  if (kind == OpKind::Gemm) s += std::string(" ") + (ta ? 'T' : 'N') + (tb ? 'T' : 'N');
  return s;
}

Op parse_op_key(const std::string& key, const std::string& where) {
  std::istringstream in(key);
  std::string name, dims, trans;
  in >> name >> dims >> trans;
  for (const auto& k : kKinds) {
    if (name != k.name) continue;
    Op o;
    o.kind = k.kind;
    const auto parts = split(dims, 'x');
    bool ok = int(parts.size()) == k.dims;
    for (size_t i = 0; ok && i < parts.size(); ++i) {
      try {
        size_t pos = 0;
        o.s[i] = std::stoll(parts[i], &pos);
        ok = pos == parts[i].size() && o.s[i] > 0;
      } catch (const std::logic_error&) {
        ok = false;
      }
    }
    if (k.kind == OpKind::Gemm) {
      ok = ok && trans.size() == 2 && (trans[0] == 'N' || trans[0] == 'T') &&
           (trans[1] == 'N' || trans[1] == 'T');
      if (ok) o.ta = trans[0] == 'T', o.tb = trans[1] == 'T';
    }
    if (!ok)
      throw UsageError(where + ": op '" + key + "': expected '" + k.name + "' and " +
                       std::to_string(k.dims) + " positive sizes joined by 'x'" +
                       (k.kind == OpKind::Gemm ? " then NN|NT|TN|TT" : "") +
                       " (e.g. 'gemm 512x1152x512 NT')");
    return o;
  }
  std::string all;
  for (const auto& k : kKinds) all += std::string(all.empty() ? "" : ", ") + k.name;
  throw UsageError(where + ": unknown op '" + name + "' in '" + key + "' (valid: " + all + ")");
}

double Op::flops() const {
  switch (kind) {
    case OpKind::Gemm:
      return 2.0 * double(s[0]) * double(s[1]) * double(s[2]);
    case OpKind::AttnFwd:
    case OpKind::AttnBwd: {
      // QK^T and AV over the causal half of the global sequence, this cp
      // rank's 1/cp share; backward recomputes scores and does 2.5x forward.
      const double Tg = double(s[1]) * double(s[5]);
      const double fwd =
          4.0 * double(s[0]) * double(s[2]) * double(s[4]) * Tg * Tg / 2 / double(s[5]);
      return kind == OpKind::AttnFwd ? fwd : 2.5 * fwd;
    }
    default:
      return 0;
  }
}

double Op::elements() const {
  const double a = double(s[0]), b = double(s[1]);
  switch (kind) {
    case OpKind::Gemm:
      return a * double(s[2]) + double(s[2]) * b + 2 * a * b;
    case OpKind::AttnFwd:
      return a * b * (2.0 * s[2] + 2.0 * s[3]) * double(s[4]);
    case OpKind::AttnBwd:
      return a * b * (4.0 * s[2] + 4.0 * s[3]) * double(s[4]);
    case OpKind::NormFwd:
      return 2 * a * b;
    case OpKind::NormBwd:
      return 3 * a * b;
    case OpKind::RopeFwd:
    case OpKind::RopeBwd:
      return 2 * a * b * double(s[2]);
    case OpKind::SwigluFwd:
      return 3 * a;
    case OpKind::SwigluBwd:
      return 5 * a;
    case OpKind::Add:
      return 3 * a;
    case OpKind::Copy:
      return 2 * a;
    case OpKind::CeFwd:
      return a * b;
    case OpKind::CeBwd:
      return 2 * a * b;
    case OpKind::EmbedFwd:
    case OpKind::EmbedBwd:
      return 2 * a * b;
    case OpKind::Adam:
      return 7 * a;
    case OpKind::Alloc:
      return a;
  }
  return 0;
}

MicroOps micro_ops(const Config& cfg) {
  const MicroDims D = micro_dims(cfg);
  const int tp = cfg.parallel.tp, cp = cfg.parallel.cp;
  const bool sp = cfg.parallel.sp;
  const std::string& mode = cfg.train.act_ckpt;
  MicroOps o;
  const int64_t N = D.N, Ns = D.Ns, d = D.d, BT = D.B * D.T;
  const Op attn_f = make(OpKind::AttnFwd, {D.B, D.T, D.Hq, D.Hkv, D.hd, cp});
  // Forward of one block (block_forward); `full` stops where the recompute
  // of act_ckpt=full stops (no output, no w2).
  auto forward = [&](std::vector<Op>& v, bool whole) {
    v.push_back(make(OpKind::NormFwd, {Ns, d}));
    v.push_back(lin_fwd(N, D.qd, d));
    v.push_back(lin_fwd(N, D.kd, d));
    v.push_back(lin_fwd(N, D.kd, d));
    v.push_back(make(OpKind::RopeFwd, {BT, D.Hq, D.hd}));
    v.push_back(make(OpKind::RopeFwd, {BT, D.Hkv, D.hd}));
    v.push_back(attn_f);
    v.push_back(make(OpKind::Copy, {Ns * d}));  // h2 = x
    v.push_back(lin_fwd(N, d, D.qd));
    if (tp > 1) v.push_back(make(OpKind::Add, {Ns * d}));
    v.push_back(make(OpKind::NormFwd, {Ns, d}));
    v.push_back(lin_fwd(N, D.F, d));
    v.push_back(lin_fwd(N, D.F, d));
    v.push_back(make(OpKind::SwigluFwd, {N * D.F}));
    if (!whole) return;
    v.push_back(make(OpKind::Copy, {Ns * d}));  // out = h2
    v.push_back(lin_fwd(N, d, D.F));
    if (tp > 1) v.push_back(make(OpKind::Add, {Ns * d}));
  };
  forward(o.block_fwd, true);
  if (mode == "full") {
    forward(o.block_recompute, false);
  } else if (mode == "selective") {
    o.block_recompute = {make(OpKind::NormFwd, {Ns, d}), attn_f, make(OpKind::NormFwd, {Ns, d}),
                         make(OpKind::SwigluFwd, {N * D.F})};
  }
  // The tensors each phase allocates (zeroed, freed later): block.cpp's
  // activations and transients, as the memory model counts them.
  const int64_t tpx = tp > 1 ? 2 * N * d : 0, spx = sp ? 2 * Ns * d : 0;
  const int64_t fwd_alloc = Ns + N * d + N * (D.qd + 2 * D.kd) + N * D.qd + N * D.Hq + Ns * d + Ns +
                            N * d + 3 * N * D.F + Ns * d + tpx + spx;
  o.block_fwd.push_back(make(OpKind::Alloc, {fwd_alloc}));
  if (mode == "full") o.block_recompute.push_back(make(OpKind::Alloc, {fwd_alloc - Ns * d}));
  if (mode == "selective")
    o.block_recompute.push_back(
        make(OpKind::Alloc, {2 * N * d + N * D.qd + N * D.Hq + N * D.F + spx}));
  auto& b = o.block_bwd;
  b.push_back(lin_bwd_w(N, d, D.F));
  b.push_back(lin_bwd_x(N, d, D.F));
  b.push_back(make(OpKind::SwigluBwd, {N * D.F}));
  b.push_back(lin_bwd_w(N, D.F, d));
  b.push_back(lin_bwd_w(N, D.F, d));
  b.push_back(lin_bwd_x(N, D.F, d));
  b.push_back(lin_bwd_x(N, D.F, d));
  b.push_back(make(OpKind::NormBwd, {Ns, d}));
  b.push_back(lin_bwd_w(N, d, D.qd));
  b.push_back(lin_bwd_x(N, d, D.qd));
  b.push_back(make(OpKind::AttnBwd, {D.B, D.T, D.Hq, D.Hkv, D.hd, cp}));
  b.push_back(make(OpKind::RopeBwd, {BT, D.Hq, D.hd}));
  b.push_back(make(OpKind::RopeBwd, {BT, D.Hkv, D.hd}));
  b.push_back(lin_bwd_w(N, D.qd, d));
  b.push_back(lin_bwd_w(N, D.kd, d));
  b.push_back(lin_bwd_w(N, D.kd, d));
  b.push_back(lin_bwd_x(N, D.qd, d));
  b.push_back(lin_bwd_x(N, D.kd, d));
  b.push_back(lin_bwd_x(N, D.kd, d));
  b.push_back(make(OpKind::NormBwd, {Ns, d}));
  b.push_back(make(OpKind::Alloc, {N * D.F + 2 * N * d + 2 * N * D.qd + 2 * N * D.kd + spx + spx}));
  o.embed_fwd = {make(OpKind::EmbedFwd, {N, d}), make(OpKind::Alloc, {N * d + tpx / 2})};
  o.embed_bwd = {make(OpKind::EmbedBwd, {N, d})};
  o.head_fwd = {make(OpKind::NormFwd, {Ns, d}), lin_fwd(N, D.V, d), make(OpKind::CeFwd, {N, D.V}),
                make(OpKind::Alloc, {Ns + Ns * d + (sp ? N * d : 0) + N * D.V + N})};
  o.head_bwd = {make(OpKind::CeBwd, {N, D.V}), lin_bwd_w(N, D.V, d), lin_bwd_x(N, D.V, d),
                make(OpKind::NormBwd, {Ns, d}), make(OpKind::Alloc, {N * d + Ns * d})};
  return o;
}

Op adam_op(int64_t elements) { return make(OpKind::Adam, {elements}); }

std::vector<Op> step_end_ops(const Config& cfg, int64_t stage_params) {
  const int z = cfg.parallel.zero_stage;
  const int64_t dpcp = int64_t(cfg.parallel.dp) * cfg.parallel.cp;
  const int64_t n = z >= 1 ? stage_params / dpcp : stage_params;
  return {adam_op(n), make(OpKind::Copy, {n / 2})};  // AdamW, the norm's squares
}

}  // namespace st::plan

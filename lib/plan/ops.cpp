// Implementation of ops.hpp: op keys, FLOPs and memory traffic.
#include "plan/ops.hpp"

#include <sstream>

#include "core/error.hpp"
#include "core/util.hpp"

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

}  // namespace st::plan

// The fused-SDPA graph description (see sdpa_graph.hpp).
#include "kernels/cuda/host/sdpa_graph.hpp"

namespace st::cuda_host {
namespace {
// Strides of [B,T,H,hd] memory viewed as dims [B,H,T,hd].
Dims4 bshd_as_bhsd(int64_t T, int64_t H, int64_t hd) { return {T * H * hd, hd, H * hd, 1}; }
// ... and viewed as dims [B,H,hd,T] (the transposed operand).
Dims4 bshd_as_bhds(int64_t T, int64_t H, int64_t hd) { return {T * H * hd, hd, 1, H * hd}; }
Dims4 packed(Dims4 d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

struct G {
  GraphSink& s;
  int64_t next_uid = kUidVirtual;
  int io(int64_t uid, GType t, Dims4 d, Dims4 st) {
    GTensor x;
    x.uid = uid, x.type = t, x.dim = d, x.stride = st;
    return s.tensor(x);
  }
  int virt(GType t, Dims4 d, Dims4 st) {
    GTensor x;
    x.uid = next_uid++, x.type = t, x.dim = d, x.stride = st, x.is_virtual = true;
    return s.tensor(x);
  }
  int scalar(int64_t uid) {
    GTensor x;
    x.uid = uid, x.dim = {1, 1, 1, 1}, x.stride = {1, 1, 1, 1}, x.by_value = true;
    return s.tensor(x);
  }
  void pw(Pw m, GType prec, int x, int b, int y) { s.pointwise(m, prec, x, b, -1, y, -1); }
  // S -> causal-masked S: select(row >= col, S, mask value), as
  // CompositeDiagonalBandMaskNode lowers a right bound of 0: int32 indices
  // (the graph's fp32 compute type), a boolean compare, an fp32 select.
  int causal(int sc, Dims4 sd, Dims4 ss) {
    const int row = virt(GType::I32, sd, ss), col = virt(GType::I32, sd, ss);
    const int mask = virt(GType::Bool, sd, ss), out = virt(GType::F32, sd, ss);
    s.pointwise(Pw::GenIndex, GType::F32, sc, -1, -1, row, 2);
    s.pointwise(Pw::GenIndex, GType::F32, sc, -1, -1, col, 3);
    pw(Pw::CmpGe, GType::Bool, row, col, mask);
    const int neg = scalar(kUidNegInf);
    s.pointwise(Pw::Select, GType::F32, sc, neg, mask, out, -1);
    return out;
  }
};

void fwd(G& g, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd) {
  const Dims4 sd{B, Hq, T, T}, ss = packed(sd), rd{B, Hq, T, 1}, rs = packed(rd);
  const GType F = GType::F32;
  const int q = g.io(kUidQ, GType::BF16, {B, Hq, T, hd}, bshd_as_bhsd(T, Hq, hd));
  const int kt = g.io(kUidK, GType::BF16, {B, Hkv, hd, T}, bshd_as_bhds(T, Hkv, hd));
  const int v = g.io(kUidV, GType::BF16, {B, Hkv, T, hd}, bshd_as_bhsd(T, Hkv, hd));
  const int o = g.io(kUidO, GType::BF16, {B, Hq, T, hd}, bshd_as_bhsd(T, Hq, hd));
  const int stats = g.io(kUidStats, F, rd, rs);
  const int scale = g.scalar(kUidScale);
  const int s1 = g.virt(F, sd, ss);
  g.s.matmul(q, kt, s1);
  const int s2 = g.virt(F, sd, ss);
  g.pw(Pw::Mul, F, s1, scale, s2);
  const int s3 = g.causal(s2, sd, ss);
  const int mx = g.virt(F, rd, rs);
  g.s.reduction(Red::Max, s3, mx);
  const int sub = g.virt(F, sd, ss);
  g.pw(Pw::Sub, F, s3, mx, sub);
  const int ex = g.virt(F, sd, ss);
  g.pw(Pw::Exp, F, sub, -1, ex);
  const int sum = g.virt(F, rd, rs);
  g.s.reduction(Red::Add, ex, sum);
  const int lg = g.virt(F, rd, rs);
  g.pw(Pw::Log, F, sum, -1, lg);
  g.pw(Pw::Add, F, mx, lg, stats);
  const int p = g.virt(GType::BF16, sd, ss);  // bmm2 takes P in the i/o type
  g.pw(Pw::Div, F, ex, sum, p);
  g.s.matmul(p, v, o);
}

void bwd(G& g, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, bool dp_workspace) {
  const GType F = GType::F32, H = GType::BF16;
  const Dims4 sd{B, Hq, T, T}, ss = packed(sd), rd{B, Hq, T, 1}, rs = packed(rd);
  const Dims4 st_strides{Hq * T * T, T * T, 1, T};  // [B,Hq,Tkv,Tq] view of an S-shaped tensor
  const Dims4 qd{B, Hq, T, hd}, qs = bshd_as_bhsd(T, Hq, hd);
  const Dims4 kvd{B, Hkv, T, hd}, kvs = bshd_as_bhsd(T, Hkv, hd);
  const int q = g.io(kUidQ, H, qd, qs);
  const int kt = g.io(kUidK, H, {B, Hkv, hd, T}, bshd_as_bhds(T, Hkv, hd));
  const int vt = g.io(kUidV, H, {B, Hkv, hd, T}, bshd_as_bhds(T, Hkv, hd));
  const int o = g.io(kUidO, H, qd, qs);
  const int dO = g.io(kUidDO, H, qd, qs);
  const int stats = g.io(kUidStats, F, rd, rs);
  const int dQ = g.io(kUidDQ, H, qd, qs);
  const int dK = g.io(kUidDK, H, kvd, kvs);
  const int dV = g.io(kUidDV, H, kvd, kvs);
  const int dQacc = dp_workspace ? -1 : g.io(kUidDQAcc, F, qd, packed(qd));
  const int scale = g.scalar(kUidScale);
  const int one = g.scalar(kUidOne);

  // softmax_sum = rowsum(dO * O) * 1, kept in a workspace tensor (the
  // frontend's strides for the virtual product, mul_dO_O)
  const int dOO = g.virt(F, qd, {Hq * T * hd, T * hd, Hq * hd, 1});
  g.pw(Pw::Mul, F, dO, o, dOO);
  const int dsum = g.virt(F, rd, rs);
  g.s.reduction(Red::Add, dOO, dsum);
  const int D = g.io(kUidSoftmaxSum, F, rd, rs);
  g.pw(Pw::Mul, F, dsum, one, D);
  // P = exp(causal(Q K^T * scale - lse))
  const int s1 = g.virt(F, sd, ss);
  g.s.matmul(q, kt, s1);
  const int s2 = g.virt(F, sd, ss);
  g.pw(Pw::Mul, F, s1, scale, s2);
  const int s3 = g.virt(F, sd, ss);
  g.pw(Pw::Sub, F, s2, stats, s3);
  const int s4 = g.causal(s3, sd, ss);
  const int P = g.virt(F, sd, ss);
  g.pw(Pw::Exp, F, s4, -1, P);
  // dV = P^T dO (per query head, then summed over each group)
  const int PT = g.virt(H, {B, Hq, T, T}, st_strides);
  g.s.reshape(P, PT);
  if (Hq == Hkv) {
    g.s.matmul(PT, dO, dV);
  } else {
    const int full = g.virt(H, qd, packed(qd));
    g.s.matmul(PT, dO, full);
    g.s.reduction(Red::Add, full, dV);
  }
  // dS = (dO V^T - softmax_sum) * P * scale
  const int dP = g.virt(F, sd, ss);
  g.s.matmul(dO, vt, dP);
  const int dP1 = g.virt(F, sd, ss);
  g.pw(Pw::Sub, F, dP, D, dP1);
  const int dP2 = g.virt(F, sd, ss);
  g.pw(Pw::Mul, F, dP1, P, dP2);
  const int dS = g.virt(F, sd, ss);
  g.pw(Pw::Mul, F, dP2, scale, dS);
  // dK = dS^T Q
  const int dST = g.virt(H, {B, Hq, T, T}, st_strides);
  g.s.reshape(dS, dST);
  if (Hq == Hkv) {
    g.s.matmul(dST, q, dK);
  } else {
    const int full = g.virt(H, qd, packed(qd));
    g.s.matmul(dST, q, full);
    g.s.reduction(Red::Add, full, dK);
  }
  // dQ = dS K: accumulated in fp32, then cast; or straight into dQ
  const int k = g.virt(H, kvd, kvs);
  g.s.reshape(kt, k);
  if (dp_workspace) {
    g.s.matmul(dS, k, dQ);
    return;
  }
  g.s.matmul(dS, k, dQacc);
  g.pw(Pw::Identity, F, dQacc, -1, dQ);
}
}  // namespace

void describe_sdpa(GraphSink& s, bool backward, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                   int64_t hd, bool dp_workspace) {
  G g{s};
  if (backward)
    bwd(g, B, T, Hq, Hkv, hd, dp_workspace);
  else
    fwd(g, B, T, Hq, Hkv, hd);
}

const char* op_name(Pw m) {
  switch (m) {
    case Pw::Mul:
      return "pw_mul";
    case Pw::Sub:
      return "pw_sub";
    case Pw::Add:
      return "pw_add";
    case Pw::Div:
      return "pw_div";
    case Pw::Exp:
      return "pw_exp";
    case Pw::Log:
      return "pw_log";
    case Pw::GenIndex:
      return "pw_gen_index";
    case Pw::CmpGe:
      return "pw_cmp_ge";
    case Pw::Select:
      return "pw_select";
    case Pw::Identity:
      return "pw_identity";
  }
  return "?";
}
const char* op_name(Red m) { return m == Red::Max ? "reduce_max" : "reduce_add"; }

int RecordingSink::tensor(const GTensor& t) {
  tensors.push_back(t);
  return int(tensors.size()) - 1;
}
void RecordingSink::pointwise(Pw mode, GType, int x, int b, int t, int y, int64_t axis) {
  RecordedOp op{op_name(mode), {x}, y, axis};
  if (b >= 0) op.in.push_back(b);
  if (t >= 0) op.in.push_back(t);
  ops.push_back(op);
}
void RecordingSink::reduction(Red mode, int x, int y) { ops.push_back({op_name(mode), {x}, y}); }
void RecordingSink::matmul(int a, int b, int c) { ops.push_back({"matmul", {a, b}, c}); }
void RecordingSink::reshape(int x, int y) { ops.push_back({"reshape", {x}, y}); }
std::vector<std::string> RecordingSink::kinds() const {
  std::vector<std::string> v;
  for (const auto& o : ops) v.push_back(o.kind);
  return v;
}
}  // namespace st::cuda_host

// The attention core of a block: plain causal attention on this rank's
// heads, or, under context parallelism, ring attention over the cp group.
// Ring forward: each rank starts from its own K/V block and passes the block
// it holds to the next rank cp-1 times, merging every partial result by
// log-sum-exp (online softmax). Ring backward: the K/V blocks go around
// again together with their fp32 dK/dV accumulators, which every rank adds
// its queries' contribution to; after cp shifts each rank holds its own
// dK/dV. Causality uses global positions, so the load-balanced chunk layout
// (rank i holds chunks i and 2cp-1-i) needs no special cases. The shifts
// are grouped send/receive pairs on the cp communicator (a message from the
// previous rank matches the one sent to the next, in call order), started
// before the block they do not depend on and waited for after it, so the
// next block's transfer overlaps the current block's kernel on either device.
#include <cmath>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "model/model_impl.hpp"

namespace st {
namespace {
// Start sending n elements to the next rank of the ring and receiving n from
// the previous one, after the work enqueued on s so far; the caller waits
// on the handle (on s) before it reads `recv`. Both ends are in flight while
// s runs the current block: the shift overlaps the attention kernel.
CommHandle ring_shift_start(Communicator* c, Stream& s, const void* send, void* recv, int64_t n,
                            DType t) {
  const int r = c->rank(), P = c->size();
  std::vector<P2POp> ops = {{true, const_cast<void*>(send), n, (r + 1) % P},
                            {false, recv, n, (r + P - 1) % P}};
  return c->exchange(ops, t, s);
}
}  // namespace

void Model::Impl::attention_forward(const Dims& D, BlockActs& a) {
  const float scale = 1.f / std::sqrt(float(D.hd));
  Stream& s = cs();
  a.att = act(D.N, D.Hq * D.hd);
  a.lse = f32({D.B, D.Hq, D.T});
  if (cp == 1) {
    ops->attention_fwd(s, a.q.raw(), a.k.raw(), a.v.raw(), D.B, D.T, D.Hq, D.Hkv, D.hd, scale,
                       a.att.raw(), a.lse.data(), cdt);
    return;
  }
  const int64_t nk = D.N * D.Hkv * D.hd;
  const size_t es = dtype_size(cdt);
  Tensor cur = act(2, nk), nxt = act(2, nk);  // [k | v] of the block held
  dev->copy(cur.raw(), a.k.raw(), size_t(nk) * es, s);
  dev->copy(static_cast<char*>(cur.raw()) + size_t(nk) * es, a.v.raw(), size_t(nk) * es, s);
  // Block j's shift (cur -> nxt) runs while block j - 1 is computed: nxt
  // was last read by the block before, enqueued before the shift starts.
  CommHandle h = ring_shift_start(par.cp, s, cur.raw(), nxt.raw(), 2 * nk, cdt);
  const int32_t* qpos = pos_dev[size_t(cp_rank)].as<int32_t>();
  ops->attention_fwd_block(s, a.q.raw(), a.k.raw(), a.v.raw(), D.B, D.T, D.T, D.Hq, D.Hkv, D.hd,
                           scale, qpos, qpos, a.att.raw(), a.lse.data(), cdt);
  Tensor ob = act(D.N, D.Hq * D.hd), lb = f32({D.B, D.Hq, D.T});
  for (int j = 1; j < cp; ++j) {
    h.wait(s);
    std::swap(cur, nxt);
    if (j < cp - 1) h = ring_shift_start(par.cp, s, cur.raw(), nxt.raw(), 2 * nk, cdt);
    const int32_t* kpos = pos_dev[size_t((cp_rank + cp - j) % cp)].as<int32_t>();
    const char* kv = static_cast<const char*>(cur.raw());
    ops->attention_fwd_block(s, a.q.raw(), kv, kv + size_t(nk) * es, D.B, D.T, D.T, D.Hq, D.Hkv,
                             D.hd, scale, qpos, kpos, ob.raw(), lb.data(), cdt);
    ops->attention_lse_merge(s, a.att.raw(), a.lse.data(), ob.raw(), lb.data(), D.B, D.T, D.Hq,
                             D.hd, cdt);
  }
}

void Model::Impl::attention_backward(const Dims& D, BlockActs& a, const Tensor& datt, Tensor& dq,
                                     Tensor& dk, Tensor& dv) {
  const float scale = 1.f / std::sqrt(float(D.hd));
  Stream& s = cs();
  if (cp == 1) {
    ops->attention_bwd(s, a.q.raw(), a.k.raw(), a.v.raw(), a.att.raw(), a.lse.data(), datt.raw(),
                       D.B, D.T, D.Hq, D.Hkv, D.hd, scale, dq.raw(), dk.raw(), dv.raw(), cdt);
    return;
  }
  const int64_t nk = D.N * D.Hkv * D.hd, nq = D.N * D.Hq * D.hd;
  const size_t es = dtype_size(cdt);
  // The block held ([k | v], compute dtype) and its fp32 [dk | dv] accumulators.
  Tensor cur = act(2, nk), nxt = act(2, nk);
  Tensor acc = f32({2, nk}), acc_nxt = f32({2, nk}), dq32 = f32({nq});
  dev->copy(cur.raw(), a.k.raw(), size_t(nk) * es, s);
  dev->copy(static_cast<char*>(cur.raw()) + size_t(nk) * es, a.v.raw(), size_t(nk) * es, s);
  acc.zero();
  dq32.zero();
  const int32_t* qpos = pos_dev[size_t(cp_rank)].as<int32_t>();
  for (int j = 0; j < cp; ++j) {
    // The K/V block moves on while this rank computes with it (both only
    // read it); its accumulators follow once the block's gradients are in.
    // Every rank starts the two shifts in the same order, so the k-th
    // receive matches the k-th send.
    CommHandle hkv;
    if (j < cp - 1) hkv = ring_shift_start(par.cp, s, cur.raw(), nxt.raw(), 2 * nk, cdt);
    const int32_t* kpos = pos_dev[size_t((cp_rank + cp - j) % cp)].as<int32_t>();
    const char* kv = static_cast<const char*>(cur.raw());
    ops->attention_bwd_block(s, a.q.raw(), kv, kv + size_t(nk) * es, a.att.raw(), a.lse.data(),
                             datt.raw(), D.B, D.T, D.T, D.Hq, D.Hkv, D.hd, scale, qpos, kpos,
                             dq32.data(), acc.data(), acc.data() + nk, cdt);
    // The last shift of the accumulators brings each rank its own dK/dV.
    ring_shift_start(par.cp, s, acc.raw(), acc_nxt.raw(), 2 * nk, DType::F32).wait(s);
    std::swap(acc, acc_nxt);
    if (j < cp - 1) {
      hkv.wait(s);
      std::swap(cur, nxt);
    }
  }
  ops->cast(s, dq32.raw(), DType::F32, dq.raw(), cdt, nq);
  ops->cast(s, acc.raw(), DType::F32, dk.raw(), cdt, nk);
  ops->cast(s, acc.data() + nk, DType::F32, dv.raw(), cdt, nk);
}
}  // namespace st

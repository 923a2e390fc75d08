// The attention core of a block: plain causal attention on this rank's
// heads, or, under context parallelism, ring attention over the cp group.
// Ring forward: each rank starts from its own K/V block and passes the block
// it holds to the next rank cp-1 times, merging every partial result by
// log-sum-exp (online softmax). Ring backward: the K/V blocks go around
// again together with their dK/dV accumulators, which every rank adds its
// queries' contribution to; after cp shifts each rank holds its own dK/dV.
// Causality uses global positions, so the load-balanced chunk layout (rank i
// holds chunks i and 2cp-1-i) needs no special cases.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "kernels/ops.hpp"
#include "model/model_impl.hpp"

namespace st {
namespace k = kernels;
namespace {
constexpr MemCat kAct = MemCat::Activations;
constexpr int kTagFwd = 0x5201, kTagBwd = 0x5202;

// Send n floats to the next rank of the ring, receive n from the previous
// one. Even ranks send first, odd ranks receive first, so blocking sends
// cannot all wait on each other.
void ring_shift(Communicator* c, const float* send, float* recv, int64_t n, int tag) {
  const int r = c->rank(), P = c->size();
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  if (r % 2 == 0) {
    c->send(send, n, next, tag);
    c->recv(recv, n, prev, tag);
  } else {
    c->recv(recv, n, prev, tag);
    c->send(send, n, next, tag);
  }
}
}  // namespace

void Model::Impl::attention_forward(const Dims& D, BlockActs& a) {
  const float scale = 1.f / std::sqrt(float(D.hd));
  a.att = Tensor({D.N, D.Hq * D.hd}, kAct);
  a.lse = Tensor({D.B, D.Hq, D.T}, kAct);
  if (cp == 1) {
    k::attention_fwd(a.q.data(), a.k.data(), a.v.data(), D.B, D.T, D.Hq, D.Hkv, D.hd, scale,
                     a.att.data(), a.lse.data());
    return;
  }
  const int64_t nk = D.N * D.Hkv * D.hd;
  std::vector<float> cur(size_t(2 * nk)), nxt(size_t(2 * nk));
  std::memcpy(cur.data(), a.k.data(), size_t(nk) * sizeof(float));
  std::memcpy(cur.data() + nk, a.v.data(), size_t(nk) * sizeof(float));
  k::attention_fwd_block(a.q.data(), a.k.data(), a.v.data(), D.B, D.T, D.T, D.Hq, D.Hkv, D.hd,
                         scale, pos.data(), pos.data(), a.att.data(), a.lse.data());
  Tensor ob({D.N, D.Hq * D.hd}, kAct), lb({D.B, D.Hq, D.T}, kAct);
  for (int j = 1; j < cp; ++j) {
    ring_shift(par.cp, cur.data(), nxt.data(), 2 * nk, kTagFwd);
    std::swap(cur, nxt);
    const std::vector<int32_t> kpos = positions((cp_rank + cp - j) % cp, D.Tg);
    k::attention_fwd_block(a.q.data(), cur.data(), cur.data() + nk, D.B, D.T, D.T, D.Hq, D.Hkv,
                           D.hd, scale, pos.data(), kpos.data(), ob.data(), lb.data());
    k::attention_lse_merge(a.att.data(), a.lse.data(), ob.data(), lb.data(), D.B, D.T, D.Hq, D.hd);
  }
}

void Model::Impl::attention_backward(const Dims& D, BlockActs& a, const float* datt, float* dq,
                                     float* dk, float* dv) {
  const float scale = 1.f / std::sqrt(float(D.hd));
  if (cp == 1) {
    k::attention_bwd(a.q.data(), a.k.data(), a.v.data(), a.att.data(), a.lse.data(), datt, D.B, D.T,
                     D.Hq, D.Hkv, D.hd, scale, dq, dk, dv);
    return;
  }
  const int64_t nk = D.N * D.Hkv * D.hd;
  // [k | v | dk | dv] of the block this rank holds.
  std::vector<float> cur(size_t(4 * nk), 0.f), nxt(size_t(4 * nk));
  std::memcpy(cur.data(), a.k.data(), size_t(nk) * sizeof(float));
  std::memcpy(cur.data() + nk, a.v.data(), size_t(nk) * sizeof(float));
  std::fill(dq, dq + D.N * D.Hq * D.hd, 0.f);
  for (int j = 0; j < cp; ++j) {
    const std::vector<int32_t> kpos = positions((cp_rank + cp - j) % cp, D.Tg);
    k::attention_bwd_block(a.q.data(), cur.data(), cur.data() + nk, a.att.data(), a.lse.data(),
                           datt, D.B, D.T, D.T, D.Hq, D.Hkv, D.hd, scale, pos.data(), kpos.data(),
                           dq, cur.data() + 2 * nk, cur.data() + 3 * nk);
    if (j < cp - 1) {
      ring_shift(par.cp, cur.data(), nxt.data(), 4 * nk, kTagBwd);
    } else {  // the last shift brings each rank its own dK/dV
      ring_shift(par.cp, cur.data() + 2 * nk, nxt.data() + 2 * nk, 2 * nk, kTagBwd);
    }
    std::swap(cur, nxt);
  }
  std::memcpy(dk, cur.data() + 2 * nk, size_t(nk) * sizeof(float));
  std::memcpy(dv, cur.data() + 3 * nk, size_t(nk) * sizeof(float));
}
}  // namespace st

// PipelineReplay (replay.hpp): every stage's recorded items on their clocks,
// the stages together (the model is described at the top of step_time.cpp).
#include "plan/replay.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "core/error.hpp"

namespace st::plan {

using record::Item;

PipelineReplay::PipelineReplay(const Config& cfg, const std::vector<Priced>& priced,
                               const std::vector<int>& stand_in, const std::vector<int>& slot,
                               const std::vector<double>& scale, const ReplayOpts& opt)
    : edge_(scale.empty()),
      P_(cfg.parallel.pp),
      v_(cfg.parallel.num_model_chunks),
      M_(cfg.train.grad_accum),
      V_(P_ * v_),
      Mr_(priced[0].rec->micro),
      opt_(opt),
      rp_(static_cast<size_t>(P_)),
      fin_f_(size_t(M_ * V_), kUnknown),
      fin_b_(size_t(M_ * V_), kUnknown) {
  for (int s = 0; s < P_; ++s) {
    const int rs = stand_in[size_t(s)];
    set_up(s, priced[size_t(slot[size_t(rs)])], rs, scale);
  }
}

// The recorded micro-batch an op of the full schedule replays: the first
// and the last are their own (set-up of the step, the gradient reduction's
// launch), the others one between.
int PipelineReplay::pick(int micro) const {
  if (Mr_ == M_ || micro == 0) return micro;
  return micro == M_ - 1 ? Mr_ - 1 : std::min(micro, Mr_ - 2);
}

// Stage s replays the record of stage `recorded_stage` (its stand-in):
// each op of the full schedule mapped to its recorded segment.
void PipelineReplay::set_up(int s, const Priced& pr, int recorded_stage,
                            const std::vector<double>& scale) {
  Replay& r = rp_[size_t(s)];
  r.pr = &pr;
  const int segs = int(r.pr->tl->seg.size());
  // pp = 1 too: the engine runs it as a one-stage pipeline.
  r.ops = pipeline_schedule(P_, v_, M_, s);
  const std::vector<PipeOp> rec = pipeline_schedule(P_, v_, Mr_, recorded_stage);
  ST_CHECK(segs == int(rec.size()), "recorded step of stage ", s, ": ", segs, " segments for ",
           rec.size(), " pipeline ops");
  for (const PipeOp& o : r.ops) {
    int t = -1;
    for (size_t j = 0; j < rec.size() && t < 0; ++j)
      if (rec[j].forward == o.forward && rec[j].chunk == o.chunk && rec[j].micro == pick(o.micro))
        t = int(j);
    ST_CHECK(t >= 0, "recorded step: no segment for a pipeline op");
    r.tmpl.push_back(t);
  }
  if (!edge_) r.scale = scale[size_t(s)];
  if (!opt_.cscale.empty()) r.cscale = opt_.cscale[size_t(s)];
  if (!opt_.quota.empty()) r.quota = opt_.quota[size_t(s)];
  if (r.quota.ranks > 0) r.cscale = 1;
  r.clock.assign(size_t(r.pr->tl->lanes), 0);
  r.done.assign(r.pr->dur.size(), 0);
  r.cause.assign(r.pr->dur.size(), kNone);
}

// Where kernels and copies priced `priced` seconds, started at `start` on
// stage r's clock L, end: the compute stream through its node's quota
// clock (none: the price as it is).
double PipelineReplay::end_of_run(Replay& r, int32_t L, double start, double priced) const {
  return L == r.pr->tl->compute ? r.quota.run(start, priced) : start + priced;
}

// A compute-stream interval of stage r (merged with the previous one when
// they touch).
void PipelineReplay::note_busy(Replay& r, double b, double e) const {
  if (!opt_.busy || e <= b) return;
  if (!r.busy.empty() && r.busy.back().second >= b - 1e-12)
    r.busy.back().second = std::max(r.busy.back().second, e);
  else
    r.busy.push_back({b, e});
}

// Polls: the thread waits from `from` to `to`, inside the communicator: the
// pending collectives progress meanwhile, each communicator's in order (one
// after its previous one), the communicators side by side.
void PipelineReplay::progress_in_wait(Replay& r, double from, double to) const {
  std::map<int32_t, double> at;  // each communicator's clock in the window (-1: stalled)
  for (Replay::Pending& q : r.pending) {
    const int32_t L = r.pr->tl->lane[q.item];
    const auto it = at.find(L);
    const double c = it == at.end() ? from : it->second;
    if (c < 0) continue;
    const double start = std::max(c, q.earliest);
    const double run = std::min(q.rem, std::max(0.0, to - start));
    q.rem -= run;
    if (q.rem > 1e-12 * (1 + run)) {
      at[L] = -1;
      continue;
    }
    q.rem = 0;
    r.done[q.item] = start + run;
    r.clock[size_t(L)] = std::max(r.clock[size_t(L)], start + run);
    at[L] = start + run;
  }
  r.pending.erase(std::remove_if(r.pending.begin(), r.pending.end(),
                                 [](const Replay::Pending& q) { return q.rem == 0; }),
                  r.pending.end());
}

// Polls: a wait from `now` for pending collective j lasts until its
// communicator has run what was issued on it before j, and j.
double PipelineReplay::completes_at(const Replay& r, size_t j, double now) const {
  const int32_t L = r.pr->tl->lane[j];
  double t = now;
  for (const Replay::Pending& q : r.pending) {
    if (r.pr->tl->lane[q.item] != L) continue;
    t = std::max(t, q.earliest) + q.rem;
    if (q.item == j) break;
  }
  return t;
}

// When the send that op o of stage s receives was issued (kUnknown: not
// yet): the previous virtual stage's forward, the next one's backward.
double PipelineReplay::send_finish(const PipeOp& o, int s) const {
  const int vs = o.chunk * P_ + s;
  return o.forward ? fin_f_[size_t(o.micro * V_ + vs - 1)] : fin_b_[size_t(o.micro * V_ + vs + 1)];
}

void PipelineReplay::run_kernel(Replay& r, size_t i, double dur, bool own) {
  const Priced& pr = *r.pr;
  const int32_t L = pr.tl->lane[i];
  double& lane = r.clock[size_t(L)];
  dur *= r.cscale;
  const double st = std::max(lane, r.host);
  lane = end_of_run(r, L, st, dur);
  dur = lane - st;
  if (L == pr.tl->compute) note_busy(r, st, lane);
  r.done[i] = lane;
  r.part[pr.tl->cls[i]] += dur;
  if (own && L == pr.tl->compute) r.work += dur;
  r.cause[i] = pr.tl->cls[i];
}

// A collective: after its clock and the host (and its stream, when it runs
// on a communicator's clock); a pipeline receive also after its send.
bool PipelineReplay::run_coll(Replay& r, int s, size_t i, double dur, bool own,
                              bool first_recv_pending, bool& used_recv) {
  const Priced& pr = *r.pr;
  const Item& it = pr.rec->step.items[i];
  const int32_t L = pr.tl->lane[i];
  double& lane = r.clock[size_t(L)];
  double st = std::max(lane, r.host);
  if (it.stream != L) st = std::max(st, r.clock[size_t(it.stream)]);
  const record::CollCall& c = pr.rec->step.collectives[size_t(it.ref)];
  if (first_recv_pending && c.recv) {
    const double dep = send_finish(r.ops[r.op], s);
    if (dep == kUnknown) return false;
    st = std::max(st, dep);
    used_recv = true;
    r.pp_recv_wait = int64_t(i);
  } else if (!c.recv && r.sent < 0 && pr.tl->cls[i] == kPp && r.op < r.ops.size() && !r.head) {
    r.sent = st;  // the op's send: its neighbour may receive from now
  }
  if (opt_.polls && it.stream != L) {
    // Issued beside compute on a thread that drives it: it moves only
    // while the thread waits for a collective (progress_in_wait).
    r.pending.push_back({i, st, dur});
    r.total[pr.tl->cls[i]] += dur;
    r.cause[i] = pr.tl->cls[i];
    return true;
  }
  lane = st + dur;
  r.done[i] = lane;
  r.total[pr.tl->cls[i]] += dur;
  if (own && it.stream == pr.tl->compute && pr.tl->cls[i] != kPp) r.work += dur;
  r.cause[i] = pr.tl->cls[i];
  return true;
}

// A stream's or the host's wait for item j: the jump it makes is exposed
// time of j's class (a pipeline receive's: pp up to its own duration, the
// rest bubble).
void PipelineReplay::run_wait(Replay& r, size_t i) {
  const Priced& pr = *r.pr;
  const Item& it = pr.rec->step.items[i];
  double& lane = r.clock[size_t(pr.tl->lane[i])];
  const size_t j = size_t(it.ref);
  double& t = it.kind == Item::Wait ? lane : r.host;
  double before = it.kind == Item::Wait ? std::max(lane, r.host) : r.host;
  if (opt_.polls && pr.rec->step.items[j].kind == Item::Coll) {
    // The thread (its compute runs inline) waits inside the communicator:
    // what it issued progresses until j is done.
    before = std::max(before, r.clock[size_t(pr.tl->compute)]);
    const bool mine = std::any_of(r.pending.begin(), r.pending.end(),
                                  [&](const Replay::Pending& q) { return q.item == j; });
    const double until = mine ? completes_at(r, j, before) : r.done[j];
    if (until > before) progress_in_wait(r, before, until * (1 + 1e-12));
  }
  const double jump = r.done[j] - before;
  if (jump > 0) {
    const Cls c = r.cause[j];
    if (int64_t(j) == r.pp_recv_wait) {
      const double x = std::min(jump, edge_ || !pr.tl->edge[j] ? r.scale * pr.dur[j] : 0.0);
      r.exposed[kPp] += x;
      r.bubble += jump - x;
    } else if (is_comm(c)) {
      r.exposed[c] += jump;
    }
  }
  t = std::max(t, r.done[j]);
}

// Runs item i of stage r; false when it waits for another stage.
bool PipelineReplay::run_item(Replay& r, int s, size_t i, bool first_recv_pending,
                              bool& used_recv) {
  const Priced& pr = *r.pr;
  const Item& it = pr.rec->step.items[i];
  const double dur = edge_ || !pr.tl->edge[i] ? r.scale * pr.dur[i] : 0.0;
  const bool own = !pr.tl->edge[i] && !r.head && r.op < r.ops.size();
  switch (it.kind) {
    case Item::Kernel:
    case Item::Copy:
      run_kernel(r, i, dur, own);
      return true;
    case Item::Coll:
      return run_coll(r, s, i, dur, own, first_recv_pending, used_recv);
    case Item::Mark:
      r.done[i] = std::max(r.clock[size_t(pr.tl->lane[i])], r.host);
      r.cause[i] = kNone;
      return true;
    case Item::Wait:
    case Item::HostWait:
      run_wait(r, i);
      return true;
  }
  return true;
}

// A run of kernels and copies on one clock starting at item i, as one step.
void PipelineReplay::run_plain(Replay& r, size_t i) {
  const Priced& pr = *r.pr;
  if (!edge_ && pr.tl->edge[i]) return;
  const double priced_d = r.scale * r.cscale * pr.run_dur[i];
  double& lane = r.clock[size_t(pr.tl->lane[i])];
  const double b0 = std::max(lane, r.host);
  lane = end_of_run(r, pr.tl->lane[i], b0, priced_d);
  const double d = lane - b0;
  if (pr.tl->lane[i] == pr.tl->compute) note_busy(r, b0, lane);
  const double stretch = priced_d > 0 ? d / priced_d : 1.0;
  for (int k = 0; k < 4; ++k) r.part[k] += stretch * r.scale * r.cscale * pr.run_part[i][size_t(k)];
  if (!pr.tl->edge[i] && !r.head && r.op < r.ops.size() && pr.tl->lane[i] == pr.tl->compute)
    r.work += d;
}

// The head, an op or the tail of stage r is done: an op's finish is its
// send (without a send of its own, the last virtual stage's forward or the
// first's backward, whom nobody receives, the compute stream's); at the
// tail, collectives never waited for progress at the step's end.
void PipelineReplay::end_segment(Replay& r, int s) {
  if (r.head) {
    r.head = false;
  } else if (r.op < r.ops.size()) {
    const PipeOp& o = r.ops[r.op];
    const int vs = o.chunk * P_ + s;
    (o.forward ? fin_f_ : fin_b_)[size_t(o.micro * V_ + vs)] =
        r.sent >= 0 ? r.sent : std::max(r.clock[size_t(r.pr->tl->compute)], r.host);
    ++r.op;
  } else {
    if (!r.pending.empty()) {
      double now = r.host;
      for (double c : r.clock) now = std::max(now, c);
      progress_in_wait(r, now, std::numeric_limits<double>::infinity());
    }
    r.finished = true;
  }
  r.pos = 0;
  r.recv_used = false;
  r.sent = -1;
}

// Stage s as far as its dependencies allow; whether it moved.
bool PipelineReplay::advance(int s) {
  Replay& r = rp_[size_t(s)];
  const Priced& pr = *r.pr;
  bool progress = false;
  while (!r.finished) {
    size_t b, e;
    bool needs_recv = false;
    if (r.head) {
      b = 0, e = pr.tl->head_end;
    } else if (r.op < r.ops.size()) {
      std::tie(b, e) = pr.tl->seg[size_t(r.tmpl[r.op])];
      const PipeOp& o = r.ops[r.op];
      const int vs = o.chunk * P_ + s;
      needs_recv = P_ > 1 && (o.forward ? vs > 0 : vs < V_ - 1);
    } else {
      b = pr.tl->tail_begin, e = pr.dur.size();
    }
    while (b + r.pos < e) {
      const size_t i = b + r.pos;
      if (pr.run_end[i] > i + 1) {  // a run of kernels and copies on one clock
        run_plain(r, i);
        r.pos = pr.run_end[i] - b;
        progress = true;
        continue;
      }
      bool used = false;
      if (!run_item(r, s, i, needs_recv && !r.recv_used, used)) return progress;
      r.recv_used = r.recv_used || used;
      ++r.pos;
      progress = true;
    }
    end_segment(r, s);
    progress = true;
  }
  return progress;
}

std::vector<Replay> PipelineReplay::run() {
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P_; ++s) progress = advance(s) || progress;
  }
  for (int s = 0; s < P_; ++s)
    ST_CHECK(rp_[size_t(s)].finished, "pipeline replay stalled at stage ", s);
  return std::move(rp_);
}

double end_of(const Replay& r) {
  double t = r.host;
  for (double c : r.clock) t = std::max(t, c);
  return t;
}

}  // namespace st::plan

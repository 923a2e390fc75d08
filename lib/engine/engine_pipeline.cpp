// The schedule runner of the engine, the one micro-batch loop: executes this
// stage's 1F1B or interleaved schedule (parallel/pipeline.hpp); pp = 1 is a
// one-stage pipeline (forward and backward of each micro-batch in turn, no
// messages). Around every pass it tells the ZeRO verbs (zero_sync.hpp)
// which micro-batch runs, and they decide what the layer hooks do in it.
// Boundary tensors go to the
// neighbouring virtual stage (chunk c of stage s is virtual stage c*pp + s)
// through the device's communicators: a receive is waited for by the compute
// stream before the op that needs it, a send is left in flight (its buffer
// kept) until the end of the step, tested after every op and at every layer
// (progress_pp_sends, from the layer hooks) so that it moves meanwhile.
//
// Point-to-point messages carry no tag (communicator.hpp): between two
// ranks they match in call order, and a communicator runs its operations in
// order on one stream. Activations (forward) and gradients (backward) are
// separate message streams, so each direction has its own communicators;
// within a direction a stage sends on the communicator of its colour and
// receives on its neighbour's, with neighbouring stages coloured differently
// (2 colours for an even number of stages, 3 for an odd one, as the
// interleaved schedule wraps from the last stage to the first). A stage's
// sends then never wait behind its own receives, which is what would
// deadlock a ring of stages that all send before they receive. Every stage
// walks forward ops and backward ops in the same (chunk, micro) order
// (pipeline_schedule), so sends and receives pair up in order.
#include <string>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/ranges.hpp"
#include "core/util.hpp"
#include "engine/engine.hpp"
#include "parallel/pipeline.hpp"
#include "tensor/interval.hpp"

namespace st {
namespace {
int colours(int P) { return P % 2 == 0 ? 2 : 3; }
int colour(int s, int P) { return P % 2 == 0 ? s % 2 : (s == P - 1 ? 2 : s % 2); }

// A range of the backend's own (Backend::ranges()) for one schedule op:
// NVTX on CUDA; on the recording backend a segment of the timeline, which
// the planner replays op by op (lib/record/record_backend.hpp).
class OpRange {
 public:
  OpRange(ranges::Sink* s, const PipeOp& op, int chunks) : s_(s) {
    if (!s_) return;
    std::string n =
        "micro-batch " + std::to_string(op.micro) + (op.forward ? " forward" : " backward");
    if (chunks > 1) n += " chunk " + std::to_string(op.chunk);
    s_->push(n.c_str());
  }
  ~OpRange() {
    if (s_) s_->pop();
  }
  OpRange(const OpRange&) = delete;
  OpRange& operator=(const OpRange&) = delete;

 private:
  ranges::Sink* s_;
};
}  // namespace

void Engine::make_pp_links() {
  const int P = mesh_.dims().pp;
  for (const char* dir : {"fwd", "bwd"})
    for (int k = 0; k < colours(P); ++k)  // device communicators: made with the others
      pp_links_.push_back(mesh_.pp().dup_group(std::string("pp_") + dir + std::to_string(k)));
}

Communicator& Engine::pp_link(bool forward, int sender) {
  const int P = mesh_.dims().pp;
  const size_t i = size_t((forward ? 0 : colours(P)) + colour(sender, P));
  return *comms_.pp.at(i);
}

double Engine::run_schedule(long step, const DataLoader& loader, StepOut& o) {
  const int P = mesh_.dims().pp, s = mesh_.coords().pp, v = int(chunks_.size());
  const int M = cfg_.train.grad_accum;
  const int prev = (s + P - 1) % P, next = (s + 1) % P;
  Stream& cs = dev_.compute_stream();
  std::vector<PpSend>& sends = pp_sends_;
  std::vector<StreamInterval> waits;
  // Receive n elements from `peer` on `c`; the compute stream waits for it.
  auto receive = [&](Communicator& c, int peer, int64_t n) {
    Tensor t({n}, cdt_, MemCat::Activations, dev_);
    StreamInterval w(dev_);
    w.begin(cs);
    c.exchange({{false, t.raw(), n, peer}}, cdt_, cs).wait(cs);
    w.end(cs);
    waits.push_back(std::move(w));
    return t;
  };
  auto send = [&](Communicator& c, int peer, Tensor t) {
    const int64_t n = t.numel();
    CommHandle h = c.exchange({{true, t.raw(), n, peer}}, cdt_, cs);
    sends.push_back({std::move(t), std::move(h)});
  };
  // d(loss) of each micro-batch: a SUM over dp x cp is then the gradient of
  // the global mean loss.
  const float scale = 1.0f / float(M * mesh_.dims().dp);
  const std::vector<PipeOp> ops = pipeline_schedule(P, v, M, s);
  // Whether another micro-batch's forward follows op k's micro-batch's
  // backward (ZeRO 3 prefetches across the turn of the walk then).
  std::vector<int> bwd_at(size_t(M * v), 0);
  int last_fwd = -1;
  for (int k = 0; k < int(ops.size()); ++k) {
    if (ops[size_t(k)].forward) last_fwd = k;
    if (!ops[size_t(k)].forward)
      bwd_at[size_t(ops[size_t(k)].micro * v + ops[size_t(k)].chunk)] = k;
  }
  MicroBatch mb;
  for (const PipeOp& op : ops) {
    const OpRange range(be_.ranges(), op, v);
    const bool more_forward = bwd_at[size_t(op.micro * v + op.chunk)] < last_fwd;
    Model& model = *chunks_[size_t(op.chunk)];
    const int vs = op.chunk * P + s;
    const bool first = vs == 0, last = vs == P * v - 1;
    // A micro-batch is loaded for its forward (every op has the same shape:
    // the backward's boundary size reads the last one loaded).
    if (op.forward) load(loader, step, op.micro, mb, o);
    const int64_t nb = model.boundary_elems(mb.B, mb.T);
    if (op.forward) {
      Tensor in;
      if (!first) in = receive(pp_link(true, prev), prev, nb);
      Tensor out;
      sync_->start_pass(false, op.micro == M - 1, more_forward);
      model.stage_forward(op.micro, mb.tokens.data(), first ? nullptr : &in, mb.targets.data(),
                          mb.B, mb.T, ckpt_mode_, scale, last ? nullptr : &out);
      sync_->end_pass();
      if (!last) send(pp_link(true, s), next, std::move(out));
    } else {
      Tensor dy;
      if (!last) dy = receive(pp_link(false, next), next, nb);
      Tensor dx;
      sync_->start_pass(true, op.micro == M - 1, more_forward);
      model.stage_backward(op.micro, last ? nullptr : &dy, scale, first ? nullptr : &dx);
      sync_->end_pass();
      if (!first) send(pp_link(false, s), prev, std::move(dx));
    }
    progress_pp_sends();
  }
  if (!sends.empty()) {  // every stage of a pipeline sends; one stage has no messages
    StreamInterval w(dev_);
    w.begin(cs);
    for (auto& p : sends) p.h.wait(cs);
    w.end(cs);
    waits.push_back(std::move(w));
    sends.clear();  // buffers freed in compute-stream order, after the waits
    dev_.synchronize();
  }
  double waited = 0;
  for (auto& x : waits) waited += x.seconds();
  return waited;
}

void Engine::progress_pp_sends() {
  for (auto& p : pp_sends_) p.h.test();
}
}  // namespace st

// Implementation of step_record.hpp.
#include "step_record.hpp"

#include <array>
#include <map>
#include <string>

#include "telemetry/schema.hpp"
#include "trainer.hpp"

using nlohmann::json;

namespace st {

json collective_stats(MpiCommunicator& world, const std::vector<Communicator*>& comms,
                      double* comm_s) {
  json comm = json::object();
  *comm_s = 0;
  for (int k = 0; k < int(CollKind::kCount); ++k) {
    CollStats s = world.stats(CollKind(k));
    for (Communicator* g : comms) {
      const CollStats& w = g->stats(CollKind(k));
      s.seconds += w.seconds;
      s.bytes += w.bytes;
      s.calls += w.calls;
    }
    if (s.calls == 0) continue;
    comm[coll_name(CollKind(k))] = {{"s", s.seconds}, {"bytes", s.bytes}, {"calls", s.calls}};
    *comm_s += s.seconds;
  }
  return comm;
}

namespace {
// Seconds the host blocked in waits on `world`'s and `comms`' collectives
// since their last reset_stats, by part of the step (comm_part): the step
// record's `comm_wait_s`.
std::array<double, kCommParts> comm_waits(MpiCommunicator& world,
                                          const std::vector<Communicator*>& comms) {
  std::array<double, kCommParts> part{};
  std::vector<Communicator*> all = {&world};
  for (Communicator* g : comms)
    if (g != &world) all.push_back(g);
  for (Communicator* g : all)
    for (int k = 0; k < int(CollKind::kCount); ++k) {
      const CollStats s = g->stats(CollKind(k));
      part[ix(comm_part(g->axis().axis, CollKind(k), false))] += s.wait_s;
      part[ix(comm_part(g->axis().axis, CollKind(k), true))] += s.host_s;
    }
  return part;
}

// The step's seconds by part (core/step_parts.hpp), every part present: the
// step record's `step_parts_s`.
json step_parts(const StepResult& t, const std::array<double, kCommParts>& wait) {
  StepMeasured m = t.fb.t;
  m.inline_waits = wait[ix(CommPart::Tp)] + wait[ix(CommPart::Cp)];
  const StepParts parts = split_step(m);
  json j = json::object();
  for (StepPart p : kAllStepParts) j[step_part_name(p)] = parts[ix(p)];
  return j;
}

// What the ops ran since the last step (kernels/ops.hpp OpPaths): the
// step record's `paths`, `{}` when the backend does not count.
json op_paths(Ops& ops) {
  const OpPaths p = ops.take_paths();
  if (!p.known) return json::object();
  return {{"attention_fwd", p.attention_fwd}, {"attention_bwd", p.attention_bwd}, {"gemm", p.gemm}};
}
}  // namespace

json step_record(const StepResult& t, const Config& cfg, MpiCommunicator& world,
                 const std::vector<Communicator*>& comms, const EngineMemory& mem, Backend& be) {
  double comm_s = 0;
  json comm = collective_stats(world, comms, &comm_s);
  const std::array<double, kCommParts> wait = comm_waits(world, comms);
  json waits = json::object();
  for (CommPart p : kAllCommParts) waits[comm_part_name(p)] = wait[ix(p)];
  // Where the step's time went by kind of kernel, when the backend times them.
  const KernelSeconds ks = be.ops().take_kernel_seconds();
  const double alloc_s = be.device().take_alloc_seconds();
  json kernel = json::object();
  if (ks.known)
    kernel = {{"gemm", ks.gemm},
              {"attention", ks.attention},
              {"elementwise", ks.elementwise},
              {"optimizer", ks.optimizer},
              {"alloc", alloc_s}};
  const int64_t tokens = int64_t(cfg.train.micro_batch) * cfg.train.grad_accum * cfg.model.seq_len;
  return {{"step", t.step},
          {"t_start", t.t_start},
          {"step_s", t.fb.t.step},
          {"slowest_step_s", t.slowest_step_s},
          {"cpu_s", t.cpu_s},
          {"data_s", t.fb.t.data},
          {"fwd_s", t.fb.t.fwd},
          {"bwd_s", t.fb.t.bwd},
          {"optim_s", t.fb.t.optim},
          {"comm_s", comm_s},
          {"comm_exposed_s", t.fb.t.comm_exposed},
          {"comm_bucket_s", t.fb.async_total_s},
          {"comm", comm},
          {"comm_wait_s", waits},
          {"kernel_s", kernel},
          {"paths", op_paths(be.ops())},
          {"ckpt_stall_s", t.fb.t.ckpt_stall},
          {"step_parts_s", step_parts(t, wait)},
          {"tokens", tokens},
          {"global_tokens", global_batch(cfg) * cfg.model.seq_len},
          {"loss", t.fb.loss},
          {"grad_norm", t.fb.grad_norm},
          {"lr", t.lr},
          {"mem_peak_bytes", mem.peak_total},
          {"mem_bytes",
           {{"params", mem.params},
            {"grads", mem.grads},
            {"optim", mem.optim},
            {"activations", mem.activations_peak}}}};
}

json trace_record(long step, const std::vector<spans::Span>& spans) {
  json a = json::array();
  for (const auto& s : spans) {
    json o = {{"n", s.name}, {"k", s.track}, {"t0", s.t0}, {"t1", s.t1}};
    if (s.mb >= 0) o["mb"] = s.mb;
    if (s.bytes >= 0) o["bytes"] = s.bytes;
    if (s.seq >= 0) o["seq"] = s.seq;
    if (s.group >= 0) o["g"] = s.group;
    a.push_back(std::move(o));
  }
  return {{"step", step}, {"spans", std::move(a)}};
}

}  // namespace st

// Implementation of ckpt_storage.hpp: the storage probe of the checkpoint
// folder at start, and whether checkpoint.interval hides a save's write.
#include "ckpt_storage.hpp"

#include <cmath>

#include "checkpoint/storage_probe.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/log.hpp"
#include "core/util.hpp"
#include "engine/train_state.hpp"
#include "job.hpp"
#include "phase_clock.hpp"

namespace st {
namespace {

// Bytes one save writes on this rank (its tensors' bytes).
double rank_checkpoint_bytes(const Job& j) {
  const CkptState s = checkpoint_state(j.engine->state(), j.cfg, j.start_step - 1, 0);
  double b = 0;
  for (const auto& t : s.tensors) {
    double n = 1;
    for (auto d : t.shape) n *= double(d);
    b += n * sizeof(float);
  }
  return b;
}

// The predicted step time in run.json (rank 0), 0 when there is none.
double predicted_step_s(const Job& j) {
  try {
    const auto run = nlohmann::json::parse(read_file(j.out + "/run.json"));
    return run.at("prediction").value("step_s", 0.0);
  } catch (const std::exception&) {
    return 0;
  }
}

void warn_at_start(const Job& j, double node_bytes, double bps) {
  const int iv = j.cfg.checkpoint.interval;
  log0("checkpoint: a save writes ", human_bytes(node_bytes), " per node: ", j.ckpt_write_expect_s,
       " s at the probed ", human_bytes(bps), "/s; checkpoint.interval=", iv,
       " hides it when a step takes >= ", j.ckpt_write_expect_s / iv, " s");
  const double step = predicted_step_s(j);
  if (step > 0 && iv * step < j.ckpt_write_expect_s)
    logw("checkpoint.interval=", iv, " steps (", iv * step, " s at the predicted ", step,
         " s per step) cannot hide a save's write (", j.ckpt_write_expect_s,
         " s at the probed bandwidth): each save will wait about ",
         j.ckpt_write_expect_s - iv * step, " s for the previous one; an interval of ",
         long(std::ceil(j.ckpt_write_expect_s / step)), " steps or more would hide it");
}
}  // namespace

double probe_checkpoint_storage(Job& j, const std::string& ckpt_dir) {
  const auto& ck = j.cfg.checkpoint;
  if (ck.interval <= 0 || ck.probe_mb <= 0) return 0;
  StorageProbe p;
  std::string err;
  const double rank_bytes = rank_checkpoint_bytes(j);
  try {
    p = probe_storage(ckpt_dir, int64_t(ck.probe_mb) << 20, j.rt->rank(), *j.node,
                      int64_t(rank_bytes));
  } catch (const std::exception& e) {
    err = e.what();
  }
  startup_clock().mark("storage_probe");
  // One rank's I/O error ends the probe on every rank of its node alike (the
  // node's collectives below would otherwise wait for the rank that left).
  double failed = err.empty() ? 0 : 1;
  j.node->all_reduce_max(&failed, 1);
  if (failed > 0 && err.empty()) return 0;
  if (!err.empty()) {
    logw("checkpoint.probe_mb: ", err, "; checkpoints are reported without the disk's figures");
    return 0;
  }
  if (j.rt->rank() == 0) {
    log0(p.describe());
    add_to_run_json(j.out + "/run.json", "storage", p.to_json());
  }
  double node_bytes = rank_bytes;  // one save's bytes on this node
  j.node->all_reduce_sum(&node_bytes, 1);
  j.ckpt_write_expect_s = p.write_all_Bps > 0 ? node_bytes / p.write_all_Bps : 0;
  if (j.rt->rank() == 0 && j.ckpt_write_expect_s > 0) warn_at_start(j, node_bytes, p.write_all_Bps);
  return p.write_all_Bps;
}

void warn_if_write_not_hidden(const Job& j, long steps, double loop_s) {
  const int iv = j.cfg.checkpoint.interval;
  if (j.rt->rank() != 0 || iv <= 0 || steps <= 0 || j.ckpt_write_expect_s <= 0) return;
  const double step = loop_s / double(steps);
  if (iv * step >= j.ckpt_write_expect_s) return;
  logw("checkpoint.interval=", iv, " steps take ", iv * step, " s (", step,
       " s per step so far), less than a save's write at the probed bandwidth (",
       j.ckpt_write_expect_s, " s): each save waits for the previous one; an interval of ",
       long(std::ceil(j.ckpt_write_expect_s / step)), " steps or more would hide it");
}

}  // namespace st

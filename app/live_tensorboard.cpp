// Implementation of live_tensorboard.hpp.
#include "live_tensorboard.hpp"

#include "core/log.hpp"
#include "telemetry/paths.hpp"
#include "tensorboard/tensorboard.hpp"

namespace st {

void open_tensorboard(Job& j) {
  if (j.rt->rank() != 0 || !j.cfg.runtime.tensorboard || !tensorboard::available()) return;
  j.tb = std::make_unique<tensorboard::LiveWriter>(tensorboard::run_folder_dir(j.out));
}

void start_tensorboard(Job& j) {
  if (j.rt->rank() != 0 || !j.cfg.runtime.tensorboard) return;
  if (!j.tb) {
    log0("tensorboard: none written: this build has no protobuf (SCALETRAIN_TENSORBOARD)");
    return;
  }
  const auto warn = [](const std::string& why) { logw("tensorboard: ", why); };
  // Before this start appends to rank 0's telemetry: what earlier starts of
  // the folder recorded goes into this start's file (one stream per run).
  j.tb->start(j.out + "/run.json", telemetry::rank_telemetry_path(j.out, 0), warn);
  tensorboard::LiveWriter* tb = j.tb.get();
  j.tel.set_observer([tb, warn](const nlohmann::json& rec) { tb->record(rec, warn); });
  log0("tensorboard: ", tb->path());
}

}  // namespace st

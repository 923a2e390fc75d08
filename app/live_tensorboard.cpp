// Implementation of live_tensorboard.hpp.
#include "live_tensorboard.hpp"

#include "core/log.hpp"
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
  j.tb->start(j.out + "/run.json");
  tensorboard::LiveWriter* tb = j.tb.get();
  j.tel.set_observer([tb](const nlohmann::json& rec) {
    tb->record(rec, [](const std::string& why) { logw("tensorboard: ", why); });
  });
  log0("tensorboard: ", tb->path());
}

}  // namespace st

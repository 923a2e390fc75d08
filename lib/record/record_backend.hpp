// RecordBackend: the recording Device, Ops and Communicators (record.hpp)
// bundled as a Backend, so the trainer's Model and Engine take it where they
// take the CPU or CUDA backend. It needs no MPI: its communicators are made
// by name and shape with group() (or from any host group's name, rank and
// size), as a fake process group stands in for the real one.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "core/ranges.hpp"
#include "record/record.hpp"

namespace st::record {

// The recording backend's ranges (Backend::ranges(), opened by the engine
// only: the process's profiler sink is another one) are the timeline's
// structure: an outermost range is a segment (the engine opens one around
// each pipeline schedule op, named for it, which becomes the phase label),
// and a range directly inside it marks its items edge (the stage's own
// work outside its layers: embedding, head and loss).
class RecordRanges final : public ranges::Sink {
 public:
  explicit RecordRanges(Recording& rec) : rec_(rec) {}
  void push(const char* name) override;
  void pop() override;
  void capture(bool) override {}

 private:
  Recording& rec_;
  int depth_ = 0;
};

class RecordBackend final : public Backend {
 public:
  RecordBackend();
  std::string name() const override { return "record"; }
  std::string supports(const Config&) const override { return ""; }
  std::string preflight(const Config&, int, int) override { return ""; }
  Device& device() override { return dev_; }
  Ops& ops() override { return *ops_; }
  // The recording communicators of the groups' names, ranks and sizes
  // (group() below), made in the order given.
  std::vector<Communicator*> make_communicators(const std::vector<Communicator*>& groups) override;
  // The recording communicator of group's name, rank and size (group() below).
  Communicator& communicator(Communicator& group) override;
  std::optional<DevicePeak> peak(const Config&) override { return std::nullopt; }
  bool computes() const override { return false; }
  ranges::Sink* ranges() override { return &ranges_; }

  // The communicator named `name` of `size` ranks in which this process is
  // `rank` (the same object for the same name; a different shape is an error).
  Communicator& group(const std::string& name, int rank, int size);
  Recording& recording() { return rec_; }

 private:
  Recording rec_;
  RecordDevice dev_;
  std::unique_ptr<Ops> ops_;
  RecordRanges ranges_{rec_};
  std::map<std::string, std::unique_ptr<RecordCommunicator>> groups_;
};

}  // namespace st::record

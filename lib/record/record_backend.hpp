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
#include "record/record.hpp"

namespace st::record {

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

  // The communicator named `name` of `size` ranks in which this process is
  // `rank` (the same object for the same name; a different shape is an error).
  Communicator& group(const std::string& name, int rank, int size);
  Recording& recording() { return rec_; }

 private:
  Recording rec_;
  RecordDevice dev_;
  std::unique_ptr<Ops> ops_;
  std::map<std::string, std::unique_ptr<RecordCommunicator>> groups_;
};

}  // namespace st::record

// RecordBackend (record_backend.hpp).
#include "record/record_backend.hpp"

#include "core/error.hpp"

namespace st::record {

void RecordRanges::push(const char* name) {
  if (depth_ == 0) {
    rec_.begin_segment();
    rec_.set_phase(name);
  } else if (depth_ == 1) {
    rec_.set_edge(true);
  }
  ++depth_;
}

void RecordRanges::pop() {
  ST_CHECK(depth_ > 0, "recording ranges: pop without a push");
  if (--depth_ == 0)
    rec_.end_segment();
  else if (depth_ == 1)
    rec_.set_edge(false);
}

RecordBackend::RecordBackend() : dev_(rec_), ops_(make_record_ops(rec_)) {}

std::vector<Communicator*> RecordBackend::make_communicators(
    const std::vector<Communicator*>& groups) {
  std::vector<Communicator*> out;
  for (Communicator* g : groups) out.push_back(&communicator(*g));
  return out;
}

Communicator& RecordBackend::communicator(Communicator& host) {
  if (auto* r = dynamic_cast<RecordCommunicator*>(&host)) return *r;  // a recording mesh's group
  return group(host.name(), host.rank(), host.size());
}

Communicator& RecordBackend::group(const std::string& name, int rank, int size) {
  auto it = groups_.find(name);
  if (it == groups_.end())
    it = groups_.emplace(name, std::make_unique<RecordCommunicator>(rec_, name, rank, size)).first;
  ST_CHECK(it->second->rank() == rank && it->second->size() == size, "recording group '", name,
           "' is rank ", it->second->rank(), " of ", it->second->size(), ", asked as ", rank,
           " of ", size);
  return *it->second;
}

}  // namespace st::record

// Data-parallel gradient reduction in buckets of parallel.dp_bucket_mb: the
// gradients of consecutive parameters (in reverse order, as backward produces
// them) are packed into flat buckets and averaged over the data-parallel group
// with non-blocking all-reduces. Times are split into total collective time and
// exposed time (the part the loop actually waited for).
#pragma once
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/tensor.hpp"

namespace st {

struct GradView {
  float* g;
  int64_t n;
};

class GradBuckets {
 public:
  GradBuckets(std::vector<GradView> grads, double bucket_mb, Communicator* dp);
  // Start the reduction of every bucket, wait for all, write the average back.
  // Returns the seconds the caller waited (exposed communication).
  double reduce_mean();
  int num_buckets() const { return int(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<GradView> members;
    Tensor flat;  // MemCat::Comm
  };
  std::vector<Bucket> buckets_;
  Communicator* dp_;
};
}  // namespace st

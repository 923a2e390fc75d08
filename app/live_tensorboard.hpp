// Rank 0's live TensorBoard output (runtime.tensorboard, lib/tensorboard):
// opened with the run folder, fed every telemetry record rank 0 writes.
// Apart from job.cpp so the start-up reads as before.
#pragma once
#include "job.hpp"

namespace st {

// Rank 0, runtime.tensorboard: makes <out>/tensorboard and its event file
// (UsageError naming the folder when it cannot: job.cpp's setup agreement
// stops every rank). Nothing on other ranks or in a build without protobuf.
void open_tensorboard(Job& j);

// After run.json is written, before the telemetry file is opened: reads its
// facts (the rates' peak and FLOPs) and the records earlier starts of the
// folder wrote, and hands the writer every telemetry record from now on. In a build without
// protobuf, rank 0 logs that no event files are written.
void start_tensorboard(Job& j);

}  // namespace st

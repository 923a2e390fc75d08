// The parts of a training step, in one place (issue 55): where a step's
// seconds go (StepPart: data, compute, optimizer, exposed communication, the
// checkpoint stall, and the rest), and the exposed communication by the axis
// its group spans (CommPart). Each enum has one name table. Telemetry's
// schema and step record, the analysis' shares and reports, the planner's
// prediction and TensorBoard's tags all read these. Core is the bottom layer,
// so every layer above names the parts the same way.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace st {

// The part of the step a collective's time belongs to, by the axis its group
// spans: tensor (and sequence) parallel, context parallel, pipeline, data
// parallel reductions, ZeRO's parameter gathers, and the host's own scalar
// reductions (other).
enum class CommPart : uint8_t { Tp, Cp, Pp, Dp, Zero, Other };
inline constexpr size_t kCommParts = 6;
inline constexpr std::array<const char*, kCommParts> kCommPartNames = {"tp", "cp",   "pp",
                                                                       "dp", "zero", "other"};
inline constexpr std::array<CommPart, kCommParts> kAllCommParts = {
    CommPart::Tp, CommPart::Cp, CommPart::Pp, CommPart::Dp, CommPart::Zero, CommPart::Other};
static_assert(size_t(CommPart::Other) + 1 == kCommParts, "a CommPart without a name");

inline const char* comm_part_name(CommPart p) { return kCommPartNames[size_t(p)]; }
inline constexpr size_t ix(CommPart p) { return size_t(p); }

// Where one step's wall time goes, every second in exactly one part:
//  data:       fetching the micro-batches;
//  compute:    forward and backward, less the tp and cp waits inside them;
//  optimizer:  clipping, the optimizer and the update, less ZeRO's gathers;
//  comm:       the step waiting for communication: exposed collectives,
//              the tp/cp waits inside compute, pipeline receives (the
//              bubble included) and ZeRO's parameter gathers;
//  ckpt_stall: the step waiting for a checkpoint (snapshot, previous save);
//  other:      the rest (the loop's own work, signal vote): what the others
//              leave of the step, so the parts add up to the step.
enum class StepPart : uint8_t { Data, Compute, Optimizer, Comm, CkptStall, Other };
inline constexpr size_t kStepParts = 6;
inline constexpr std::array<const char*, kStepParts> kStepPartNames = {
    "data", "compute", "optimizer", "comm", "ckpt_stall", "other"};
inline constexpr std::array<StepPart, kStepParts> kAllStepParts = {
    StepPart::Data, StepPart::Compute,   StepPart::Optimizer,
    StepPart::Comm, StepPart::CkptStall, StepPart::Other};
static_assert(size_t(StepPart::Other) + 1 == kStepParts, "a StepPart without a name");

inline const char* step_part_name(StepPart p) { return kStepPartNames[size_t(p)]; }
inline constexpr size_t ix(StepPart p) { return size_t(p); }

// Seconds by StepPart.
using StepParts = std::array<double, kStepParts>;

// What a step record measured (seconds; telemetry's step fields): one
// rank's step, or a sum over steps and ranks (+=).
struct StepMeasured {
  double step = 0, data = 0, fwd = 0, bwd = 0, optim = 0, comm_exposed = 0, ckpt_stall = 0;
  double inline_waits = 0;  // the tp and cp waits (comm_wait_s), inside fwd and bwd
  StepMeasured& operator+=(const StepMeasured& o);
};

// The step's seconds by part (the rule above); they add up to m.step.
StepParts split_step(const StepMeasured& m);

// Each part's share of `total` (all 0 when total is not positive).
StepParts shares_of(const StepParts& s, double total);

}  // namespace st

// The part of the step a collective's time belongs to, by the axis its
// group spans: tensor (and sequence) parallel, context parallel, pipeline,
// data parallel reductions, ZeRO's parameter gathers, and the host's own
// scalar reductions (other). One enum and one name table: telemetry's
// comm_wait_s members, the analysis' exposed-communication split, the
// planner's classes and its reports all read this (issue 55). Header only,
// so that layers above comm that link nothing of it (telemetry, analysis)
// name the parts the same way.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace st {

enum class CommPart : uint8_t { Tp, Cp, Pp, Dp, Zero, Other };
inline constexpr size_t kCommParts = 6;
inline constexpr std::array<const char*, kCommParts> kCommPartNames = {"tp", "cp",   "pp",
                                                                       "dp", "zero", "other"};
inline constexpr std::array<CommPart, kCommParts> kAllCommParts = {
    CommPart::Tp, CommPart::Cp, CommPart::Pp, CommPart::Dp, CommPart::Zero, CommPart::Other};

inline const char* comm_part_name(CommPart p) { return kCommPartNames[size_t(p)]; }
inline constexpr size_t ix(CommPart p) { return size_t(p); }

}  // namespace st

// The pricing type of one kernel call: its kind and shape, the key a CPU
// cluster file's measured table is indexed by, its FLOPs and the elements it
// moves. The calls themselves come from the trainer's engine run on the
// recording backend (lib/record; step_time.cpp converts each recorded
// KernelCall to an Op); the time model prices them (measured table on CPUs,
// roofline with efficiencies on GPUs).
#pragma once
#include <cstdint>
#include <string>

namespace st::plan {

enum class OpKind {
  Gemm,       // m n k ta tb: C[m,n] = op(A)[m,k] op(B)[k,n]
  AttnFwd,    // B T(local) Hq Hkv hd cp: causal attention, or the cp ring's blocks
  AttnBwd,    //   same
  NormFwd,    // rows d
  NormBwd,    // rows d
  RopeFwd,    // rows(B*T) heads hd
  RopeBwd,    //   same
  SwigluFwd,  // n
  SwigluBwd,  // n
  Add,        // n (y += x)
  Copy,       // n
  CeFwd,      // rows V
  CeBwd,      // rows V
  EmbedFwd,   // rows d
  EmbedBwd,   // rows d (V rows of the table)
  Adam,       // n elements of the optimizer step
  Alloc,      // n: fresh zeroed tensors of n elements in all (lib/tensor's allocate + free)
};
const char* op_name(OpKind k);

struct Op {
  OpKind kind = OpKind::Copy;
  int64_t s[6] = {0, 0, 0, 0, 0, 0};  // shape, per kind (above)
  bool ta = false, tb = false;        // GEMM transposes
  std::string key() const;            // e.g. "gemm 512x1152x512 NT"
  double flops() const;               // arithmetic (GEMM 2mnk; attention: causal work)
  double elements() const;            // elements the op reads and writes (memory traffic / bytes)
};
// Parses Op::key(); throws UsageError naming `where` on a bad key.
Op parse_op_key(const std::string& key, const std::string& where);

}  // namespace st::plan

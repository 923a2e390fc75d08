// The telemetry field tables (schema.hpp) and the check the writer applies
// to every record. Adding a field to a record means adding it here, with its
// meaning; docs/telemetry.md is regenerated from these tables.
#include "telemetry/schema.hpp"

#include "core/step_parts.hpp"

namespace st::telemetry {
namespace {

std::vector<Field> mesh_members() {
  return {{"dp", Ftype::Int, "data-parallel size"},
          {"tp", Ftype::Int, "tensor-parallel size"},
          {"pp", Ftype::Int, "pipeline stages"},
          {"cp", Ftype::Int, "context-parallel size"},
          {"sp", Ftype::Bool, "sequence parallelism on"},
          {"zero_stage", Ftype::Int, "ZeRO stage"},
          {"num_model_chunks", Ftype::Int, "model chunks per pipeline stage"},
          {"order", Ftype::String, "rank order of the mesh, outermost first (`pp,dp,cp,tp`)"}};
}

std::vector<Field> coll_members() {
  const std::vector<Field> stat = {{"s", Ftype::Float, "seconds inside this kind of collective"},
                                   {"bytes", Ftype::Int, "bytes sent (nccl-tests \"size\")"},
                                   {"calls", Ftype::Int, "number of calls"}};
  std::vector<Field> out;
  for (const char* k : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv"})
    out.push_back({k, Ftype::Object, "", stat});
  return out;
}

}  // namespace

const std::vector<std::string>& comm_part_names() {
  static const std::vector<std::string> n(kCommPartNames.begin(), kCommPartNames.end());
  return n;
}

namespace {
// Float members named by a part list's name table, each with its meaning
// (an array of the same length: a part added without one does not compile).
template <size_t N>
std::vector<Field> part_members(const std::array<const char*, N>& names,
                                const std::array<const char*, N>& meaning) {
  std::vector<Field> out;
  for (size_t i = 0; i < N; ++i) out.push_back({names[i], Ftype::Float, meaning[i]});
  return out;
}

// comm_wait_s's members: core/step_parts.hpp's CommParts.
std::vector<Field> comm_wait_members() {
  return part_members(
      kCommPartNames,
      {"tensor (and sequence) parallel collectives", "context parallel (ring attention)",
       "pipeline stage links (point to point)", "data-parallel gradient reductions",
       "ZeRO parameter gathers (all_gather on dp/dp_cp)",
       "blocking reductions of host values (loss, gradient norm, signal vote)"});
}

// step_parts_s's members: core/step_parts.hpp's StepParts and what each holds.
std::vector<Field> step_part_members() {
  return part_members(
      kStepPartNames,
      {"`data_s`", "`fwd_s` + `bwd_s` less the tp and cp waits inside them (`comm_wait_s`)",
       "`optim_s`", "`comm_exposed_s` plus the tp and cp waits inside the forward and backward",
       "`ckpt_stall_s`",
       "what the other parts leave of `step_s`: the loop's own work, the signal vote"});
}
}  // namespace

const std::vector<Field>& header_fields() {
  static const std::vector<Field> f = {
      {"type", Ftype::String, "`\"header\"`"},
      {"schema", Ftype::String, "`scaletrain.telemetry/1`; a reader refuses other major versions"},
      {"run_id", Ftype::String,
       "identifies the run folder's run (also in run.json); kept across resumes, so a rank file "
       "copied from another run is refused by the reader"},
      {"run_name", Ftype::String, "`runtime.name`"},
      {"rank", Ftype::Int, "MPI world rank"},
      {"world_size", Ftype::Int, "MPI world size when this file was started"},
      {"local_rank", Ftype::Int, "rank within the node (MPI_Comm_split_type)"},
      {"local_size", Ftype::Int, "ranks on the node"},
      {"host", Ftype::String, "host name"},
      {"mesh", Ftype::Object, "the parallel layout", mesh_members()},
      {"coords",
       Ftype::Object,
       "this rank's coordinates in the mesh",
       {{"pp", Ftype::Int, ""},
        {"dp", Ftype::Int, ""},
        {"cp", Ftype::Int, ""},
        {"tp", Ftype::Int, ""}}},
      {"layers", Ftype::List,
       "the transformer blocks this rank holds: one `[first, last)` pair per model chunk"},
      {"threads", Ftype::Int, "OpenMP (and OpenBLAS) threads of this rank"},
      {"device", Ftype::String,
       "`cpu` or `cuda:<n>` (the CUDA ordinal this rank uses, after CUDA_VISIBLE_DEVICES)"},
      {"device_name", Ftype::String, "`cpu` or the GPU's product name (`cudaGetDeviceProperties`)"},
      {"slurm_job_id", Ftype::StringOrNull, "`SLURM_JOB_ID` when present"},
      {"start_time", Ftype::String, "ISO-8601 UTC"},
      {"startup_s", Ftype::Float,
       "seconds from this process's start (as the kernel records it) to this header: MPI "
       "start-up, config, backend, model, the peak measurement"},
      {"startup_cpu_s", Ftype::Float,
       "user + system CPU seconds this process used up to this header"},
  };
  return f;
}

namespace {
// The members of the step record's `paths` (kernels/ops.hpp, OpPaths).
std::vector<Field> op_path_members() {
  return {{"attention_fwd", Ftype::Object,
           "full causal attention forward: `cpu`; CUDA: `cudnn` (fused SDPA), `block` (the "
           "block kernels where cuDNN could not take the shape: a fallback); ring-attention "
           "blocks: `ring_block`"},
          {"attention_bwd", Ftype::Object,
           "the same for the backward, plus CUDA's `block_chosen` (block kernels chosen by "
           "`runtime.attention_backward=deterministic`, not a fallback)"},
          {"gemm", Ftype::Object,
           "GEMMs: `cpu_fp32`, `cpu_bf16` (the libraries `Ops::describe()` names); CUDA: "
           "`cublaslt_h<i>`, the i-th cuBLASLt heuristic result (`cublaslt_h0` its first "
           "choice, higher after a fallback)"}};
}
}  // namespace

const std::vector<Field>& step_fields() {
  static const std::vector<Field> f = {
      {"type", Ftype::String, "`\"step\"`"},
      {"step", Ftype::Int, "1-based global step number (continues across resume)"},
      {"t_start", Ftype::Float, "wall clock at step start"},
      {"step_s", Ftype::Float, "whole step, data to optimizer end, including checkpoint stall"},
      {"slowest_step_s", Ftype::Float,
       "the slowest rank's `step_s` of this step (the same on every rank): the pace the "
       "tokens/s and MFU of the progress line, TensorBoard and report.md are read from"},
      {"cpu_s", Ftype::Float,
       "CPU seconds this rank's process used during the step (all its threads, waiting "
       "included: a rank that spins on a collective counts); against `step_s` it tells work "
       "from waiting for a core on a shared machine"},
      {"data_s", Ftype::Float, "fetching the batch"},
      {"fwd_s", Ftype::Float, "forward compute (all micro-batches)"},
      {"bwd_s", Ftype::Float, "backward compute (all micro-batches)"},
      {"optim_s", Ftype::Float,
       "clip + optimizer + parameter update, less the wait for ZeRO's parameter gathers "
       "after it (that wait is in `comm_exposed_s`)"},
      {"comm_s", Ftype::Float, "total time inside collectives (the sum of `comm`)"},
      {"comm_exposed_s", Ftype::Float,
       "time the step waited for communication outside the forward and backward compute: "
       "pipeline receives (the bubble included), the gradient reductions' tail, ZeRO's "
       "parameter gathers, the loss, norm and signal reductions (the tp and cp waits inside "
       "the compute are in `fwd_s`/`bwd_s` and `comm_wait_s`)"},
      {"comm_bucket_s", Ftype::Float,
       "seconds the data-parallel gradient bucket reductions were in flight, summed over "
       "buckets (launch during backward to completion); compare with `comm_exposed_s` for the "
       "overlap"},
      {"comm", Ftype::Object,
       "per collective kind that ran this step: `{\"s\":float,\"bytes\":int,\"calls\":int}`",
       coll_members()},
      {"comm_wait_s", Ftype::Object,
       "seconds this rank's host blocked waiting for collectives this step, by part of the "
       "step (the planner's parts): what splits `comm_exposed_s` by tp / cp / pp / dp / ZeRO. "
       "On CPU ranks the waits are the exposed communication (the tp and cp waits inside "
       "`fwd_s`/`bwd_s`, the others in `comm_exposed_s`); on GPUs the device streams wait "
       "instead and these stay near 0",
       comm_wait_members()},
      {"ckpt_stall_s", Ftype::Float,
       "time the loop waited for checkpointing this step (snapshot + waiting for a previous "
       "save)"},
      {"step_parts_s", Ftype::Object,
       "`step_s` split into parts, every second in exactly one (they add up to `step_s`): "
       "derived from the fields above by one rule (core/step_parts.hpp), the same the "
       "analysis' shares and the planner's prediction use",
       step_part_members()},
      {"tokens", Ftype::Int, "tokens processed by this rank this step"},
      {"global_tokens", Ftype::Int, "tokens in the global batch this step"},
      {"loss", Ftype::FloatOrNull,
       "mean training loss of the global batch (same on every rank); `null` when not finite"},
      {"grad_norm", Ftype::FloatOrNull, "global gradient norm before clipping"},
      {"lr", Ftype::FloatOrNull, "learning rate used this step"},
      {"mem_peak_bytes", Ftype::Int, "peak tracked bytes on this rank so far in this step"},
      {"mem_bytes",
       Ftype::Object,
       "current bytes per category",
       {{"params", Ftype::Int, ""},
        {"grads", Ftype::Int, ""},
        {"optim", Ftype::Int, ""},
        {"activations", Ftype::Int, ""}}},
      {"kernel_s",
       Ftype::Object,
       "where the step's compute went, on backends that time their kernels (the CPU backend; "
       "`{}` elsewhere): host seconds inside kernels of each kind; the rest of `step_s` is "
       "communication, data and the loop itself",
       {{"gemm", Ftype::Float, "GEMMs"},
        {"attention", Ftype::Float, "attention"},
        {"elementwise", Ftype::Float, "casts, norms, RoPE, SwiGLU, embedding, cross-entropy"},
        {"optimizer", Ftype::Float, "norms and AdamW"},
        {"alloc", Ftype::Float, "the device's allocate/free"}}},
      {"paths", Ftype::Object,
       "which implementation ran this step, calls per path (no silent fallback; `{}` on "
       "backends that do not count); each member maps a path name to its calls",
       op_path_members()},
  };
  return f;
}

const std::vector<Field>& trace_fields() {
  static const std::vector<Field> f = {
      {"type", Ftype::String, "`\"trace\"`"},
      {"step", Ftype::Int, "the step the spans belong to"},
      {"spans",
       Ftype::List,
       "what this rank did during the step, one object per span, in the order they ended; "
       "times on this rank's clock (add the `clock` event's `offset_s` for rank 0's)",
       {{"n", Ftype::String,
         "what: `data` (loading a micro-batch), `fwd`, `bwd`, `optim`, `signal_vote`, "
         "`ckpt_snapshot`, or a collective's op "
         "(`all_reduce`, `reduce_scatter`, `all_gather`, `broadcast`, `send/recv` (pipeline "
         "and ring exchanges), `send`, `recv`)"},
        {"k", Ftype::String,
         "the track (stream): `host`, `compute`, or `comm:<group>` (`<group>#2` for a second "
         "communicator with the same name and members) "
         "for a collective on that group's communicator"},
        {"t0", Ftype::Float, "start, epoch seconds"},
        {"t1", Ftype::Float, "end, epoch seconds"},
        {"mb", Ftype::Int, "micro-batch (`data`, `fwd`, `bwd`)"},
        {"bytes", Ftype::Int, "a collective's bytes (nccl-tests \"size\")"},
        {"seq", Ftype::Int,
         "a collective's sequence number on its group: the same collective on every member"},
        {"g", Ftype::Int,
         "a collective's group by its lowest world rank (with the track's group name, one "
         "group of the mesh)"}}},
  };
  return f;
}

const std::vector<Field>& event_common_fields() {
  static const std::vector<Field> f = {
      {"type", Ftype::String, "`\"event\"`"},
      {"event", Ftype::String, "the event's name (table below)"},
      {"step", Ftype::Int, "the step it belongs to (absent for `resume_open`)"},
      {"t", Ftype::Float, "wall clock when it was recorded"},
  };
  return f;
}

const std::vector<EventSpec>& event_specs() {
  static const std::vector<EventSpec> e = {
      {"resume_open",
       "a resumed run reopened this file (written instead of a second header; a cut line just "
       "before it is tolerated)",
       {}},
      {"ckpt_resume",
       "the run resumed from a checkpoint",
       {{"path", Ftype::String, "the step folder"},
        {"from_step", Ftype::Int, "the step it was taken at"},
        {"load_s", Ftype::Float, "seconds to read this rank's shards"},
        {"restore_s", Ftype::Float,
         "the whole restore on this rank: choosing the step (its rank files' metadata checked), "
         "then load_s"},
        {"bytes", Ftype::Int, "the checkpoint's tensor bytes, every rank's (index.json `bytes`)"}}},
      {"ckpt_begin", "a save starts", {{"mode", Ftype::String, "`async` or `sync`"}}},
      {"ckpt_commit",
       "a save was committed by every rank",
       {{"stall_s", Ftype::Float,
         "what the loop waited (wait_prev_s + snapshot_s; whole save "
         "in sync mode)"},
        {"snapshot_s", Ftype::Float, "copying the shards into host buffers"},
        {"wait_prev_s", Ftype::Float, "waiting for the previous save"},
        {"write_s", Ftype::Float, "writing, vote and commit (in the background when async)"},
        {"bytes", Ftype::Int, "tensor bytes this rank wrote"},
        {"bandwidth_Bps", Ftype::Float, "bytes / write_s"},
        {"file_s", Ftype::Float, "writing this rank's file, mkdir to fsync (before the vote)"},
        {"disk_write_Bps", Ftype::Float,
         "the storage probe's write bandwidth of this rank's node, one writer per rank (0: "
         "not probed; run.json `storage`)"},
        {"node_write_Bps", Ftype::Float,
         "rank 0: the slowest node's write bandwidth (its ranks' bytes / its slowest file_s); "
         "0 elsewhere"},
        {"of_disk", Ftype::Float,
         "rank 0: node_write_Bps / that node's disk_write_Bps (0: unknown)"},
        {"phases_s",
         Ftype::Object,
         "where write_s went on this rank, seconds per phase (a phase this rank did not run "
         "is absent)",
         {{"mkdir", Ftype::Float, "creating the step_N.tmp folder"},
          {"h5_create", Ftype::Float, "H5Fcreate and the file attributes"},
          {"h5_datasets", Ftype::Float,
           "creating every dataset (its storage allocated) and its shape attributes"},
          {"data", Ftype::Float,
           "the datasets' bytes, checksummed and written in one pass by large pwrites"},
          {"h5_close", Ftype::Float, "checksum attributes, meta blobs, H5Fflush and H5Fclose"},
          {"fsync", Ftype::Float, "fsync of the rank file (once)"},
          {"crc", Ftype::Float,
           "the whole file's CRC32C: the data's checksums combined, HDF5's metadata read back"},
          {"vote", Ftype::Float, "the all-ranks vote (waits for the slowest rank's write)"},
          {"folder_fsync", Ftype::Float, "fsync of the step folder (one rank per host)"},
          {"gather", Ftype::Float, "gathering the shard lists on rank 0"},
          {"index", Ftype::Float, "rank 0: writing index.json"},
          {"rename", Ftype::Float, "rank 0: the commit rename and the folder's fsync"},
          {"latest", Ftype::Float, "rank 0: writing `latest`"},
          {"retention", Ftype::Float, "rank 0: removing checkpoints beyond keep_last_n"},
          {"decision", Ftype::Float, "the commit decision from rank 0"}}},
        {"path", Ftype::String, "the committed step folder"}}},
      {"ckpt_fail", "a save failed", {{"error", Ftype::String, "why, naming the rank and file"}}},
      {"signal",
       "SIGTERM, SIGINT or SIGUSR1 reached the ranks; an emergency checkpoint follows",
       {{"signal", Ftype::String, "`SIGTERM`, `SIGINT` or `SIGUSR1`"}}},
      {"clock",
       "the ranks measured their clocks against rank 0's (MPI ping-pongs, best of 8, by one "
       "rank per host along a binomial tree; a host's other ranks share its figures), at the "
       "start (`step` 0) and at the end of the run",
       {{"offset_s", Ftype::Float, "add to this rank's times for rank 0's clock"},
        {"error_s", Ftype::Float,
         "bound on the offset's error (half the best round trip, summed over the hops to "
         "rank 0)"},
        {"rtt_s", Ftype::Float, "the best round trip of the host's last hop"},
        {"when", Ftype::String, "`start` or `end`"}}},
      {"nan_skip",
       "loss or gradient norm not finite; the update was skipped",
       {{"loss", Ftype::FloatOrNull, "the loss"}, {"grad_norm", Ftype::FloatOrNull, "the norm"}}},
      {"eval",
       "the loss on the validation split (data.val_path) after this step, every "
       "train.eval_interval steps and after the last",
       {{"val_loss", Ftype::FloatOrNull,
         "mean loss over data.val_batches global batches of fixed held-out windows (same on every "
         "rank); `null` when not finite"},
        {"val_tokens", Ftype::Int, "tokens the evaluation read (global)"},
        {"eval_s", Ftype::Float, "seconds the evaluation took on this rank"}}},
      {"end",
       "the loop ended (`step` is the last step done)",
       {{"status", Ftype::String, "`ok` or `signal`"},
        {"wall_s", Ftype::Float, "seconds from the first step to the end, drain included"},
        {"drain_s", Ftype::Float, "seconds waiting for the last background save to commit"}}},
  };
  return e;
}

std::string type_text(Ftype t) {
  switch (t) {
    case Ftype::Int:
      return "int";
    case Ftype::Float:
      return "float";
    case Ftype::FloatOrNull:
      return "float or null";
    case Ftype::String:
      return "string";
    case Ftype::StringOrNull:
      return "string or null";
    case Ftype::Bool:
      return "bool";
    case Ftype::Object:
      return "object";
    case Ftype::List:
      return "list";
  }
  return "?";
}

namespace {
bool has_type(const nlohmann::json& v, Ftype t) {
  switch (t) {
    case Ftype::Int:
      return v.is_number_integer();
    case Ftype::Float:
      return v.is_number();
    case Ftype::FloatOrNull:
      return v.is_number() || v.is_null();
    case Ftype::String:
      return v.is_string();
    case Ftype::StringOrNull:
      return v.is_string() || v.is_null();
    case Ftype::Bool:
      return v.is_boolean();
    case Ftype::Object:
      return v.is_object();
    case Ftype::List:
      return v.is_array();
  }
  return false;
}

std::string check_members(const nlohmann::json& obj, const std::vector<Field>& fields,
                          const std::string& where) {
  for (const auto& [k, v] : obj.items()) {
    const Field* f = nullptr;
    for (const auto& x : fields)
      if (x.name == k) f = &x;
    if (!f) return where + ": field '" + k + "' is not in the telemetry schema";
    if (!has_type(v, f->type))
      return where + ": field '" + k + "' must be " + type_text(f->type) + ", got " + v.dump();
    if (f->type == Ftype::Object && !f->members.empty()) {
      std::string e = check_members(v, f->members, where + "." + k);
      if (!e.empty()) return e;
    }
    if (f->type == Ftype::List && !f->members.empty())
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string at = where + "." + k + "[" + std::to_string(i) + "]";
        if (!v[i].is_object()) return at + " must be an object, got " + v[i].dump();
        std::string e = check_members(v[i], f->members, at);
        if (!e.empty()) return e;
      }
  }
  return "";
}
}  // namespace

std::string check_record(const nlohmann::json& r) {
  if (!r.is_object()) return "telemetry record is not a JSON object";
  auto t = r.find("type");
  if (t == r.end() || !t->is_string()) return "telemetry record without a string 'type'";
  const std::string type = t->get<std::string>();
  if (type == "header") return check_members(r, header_fields(), "telemetry header");
  if (type == "step") return check_members(r, step_fields(), "telemetry step record");
  if (type == "trace") return check_members(r, trace_fields(), "telemetry trace record");
  if (type != "event") return "telemetry record of unknown type '" + type + "'";
  auto e = r.find("event");
  if (e == r.end() || !e->is_string()) return "telemetry event without a string 'event'";
  for (const auto& spec : event_specs())
    if (spec.name == *e) {
      std::vector<Field> all = event_common_fields();
      all.insert(all.end(), spec.extra.begin(), spec.extra.end());
      return check_members(r, all, "telemetry event '" + spec.name + "'");
    }
  return "telemetry event '" + e->get<std::string>() + "' is not in the telemetry schema";
}

}  // namespace st::telemetry

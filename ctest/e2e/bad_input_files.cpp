// Bad-input rows, part 2: files the programs read or own. Token files and
// sidecars, checkpoints (a damaged index, an index bound to other files,
// auto resume that must fall back or refuse, step folders that must never be
// overwritten), run folders (one job each), and the telemetry that
// scaletrain-analyze reads. Each row copies the shared fixture run and
// damages its copy.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "../data/layouts.hpp"
#include "bad_input.hpp"

namespace fs = std::filesystem;

namespace st::test::bad {
namespace {

const std::string kStep3 = "/checkpoints/step_00000003", kStep6 = "/checkpoints/step_00000006";

// n ids below 200; with big_every, every big_every-th id is 300 (every
// sample of the first step then holds one: ids are checked as read).
void write_tokens(const std::string& path, size_t n, size_t big_every = 0) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint16_t(i % 200);
  for (size_t i = big_every; big_every && i < n; i += big_every) v[i] = 300;
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 2));
}

// A copy of the fixture run to damage, at ctx.dir/run.
std::string run_copy(Ctx& x) {
  copy_tree(x.fixture, x.dir + "/run");
  fs::remove(x.dir + "/run/run.lock");
  return x.dir + "/run";
}

// Resume (train to step 8) from a damaged copy of the fixture.
std::string resume(Ctx& x, const std::string& what) {
  return trainer(2, tiny() + " --set train.steps=8 --set checkpoint.interval=3" +
                        " --set runtime.cpu_peak_gflops=1 --set checkpoint.resume=" + what +
                        " --out " + x.dir + "/run");
}

// Copies files of step 3 over those of step 6 in run folder `r`.
void step3_into_step6(const std::string& r, std::initializer_list<const char*> files) {
  for (const char* f : files)
    fs::copy_file(r + kStep3 + f, r + kStep6 + f, fs::copy_options::overwrite_existing);
}

// The first shard of the first tensor of an index, to damage.
nlohmann::json& first_shard(nlohmann::json& j) { return j["tensors"].begin().value()["shards"][0]; }

Case row(std::string name, std::function<std::string(Ctx&)> cmd, std::vector<std::string> expect,
         int code = 2, std::function<std::string(Ctx&, const RunResult&)> check = nullptr) {
  Case c;
  c.check = std::move(check);
  c.name = std::move(name);
  c.command = std::move(cmd);
  c.expect = std::move(expect);
  c.exit_code = code;
  return c;
}

// "" when the snapshot taken before the run still holds.
std::function<std::string(Ctx&, const RunResult&)> unchanged(const std::string& sub) {
  return [sub](Ctx& x, const RunResult&) {
    return slurp(x.dir + "/before.txt") == snapshot(x.dir + sub)
               ? ""
               : "files under " + sub + " changed";
  };
}

std::vector<Case> data_rows() {
  const std::string file = " --set data.source=file --set data.path=";
  auto data = [file](const std::string& path, int ranks = 1) {
    return trainer(ranks, tiny() + file + path + " --set runtime.cpu_peak_gflops=1");
  };
  // A token file in a published layout (ctest/data/layouts.hpp), run with its
  // own run folder, which a refused run must not create.
  auto layout = [file](const std::string& path, const std::string& sets = "") {
    return trainer(1, tiny() + file + path + sets + " --set runtime.cpu_peak_gflops=1 --out " +
                          fs::path(path).parent_path().string() + "/run");
  };
  auto no_run = [](Ctx& x, const RunResult&) -> std::string {
    return fs::exists(x.dir + "/run") ? "a refused run created its run folder" : "";
  };
  auto ids = [](size_t n) {
    std::vector<uint32_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint32_t(i % 200);
    return v;
  };
  auto with_sidecar = [](Ctx& x, const std::string& sidecar) {
    write_tokens(x.dir + "/t.bin", 5000);
    put(x.dir + "/t.bin.json", sidecar);
    return x.dir + "/t.bin";
  };
  return {
      row("missing data file", [=](Ctx& x) { return data(x.dir + "/missing.bin", 2); },
          {"missing.bin"}),
      row("truncated data file",
          [=](Ctx& x) {
            write_tokens(x.dir + "/odd.bin", 5000);
            std::ofstream(x.dir + "/odd.bin", std::ios::app) << 'x';
            return data(x.dir + "/odd.bin");
          },
          {"odd.bin", "truncated"}),
      row("data shorter than its sidecar",
          [=](Ctx& x) {
            return data(with_sidecar(x, R"({"dtype":"uint16","vocab_size":256,"n_tokens":9000})"));
          },
          {"t.bin", "9000"}),
      row(
          "token id above vocab",
          [=](Ctx& x) {
            write_tokens(x.dir + "/big.bin", 5000, 50);
            return layout(x.dir + "/big.bin");
          },
          {"big.bin", "token id 300", "byte offset", "vocab_size"}, 2, no_run),
      row(
          "token id above vocab that only a later step reads (both ranks stop)",
          [=](Ctx& x) {
            std::vector<uint32_t> v = ids(5000);
            v[4000] = 300;
            test::write_bytes(x.dir + "/late.bin", test::raw_bytes(v, 2));
            return trainer(2, tiny() + file + x.dir + "/late.bin --set train.steps=300" +
                                  " --set runtime.cpu_peak_gflops=1 --out " + x.dir + "/run");
          },
          {"late.bin", "token id 300", "byte offset 8000"}, 2,
          [](Ctx& x, const RunResult&) -> std::string {
            // Steps ran before the one that reads the id (start-up checks
            // only the first step's batch).
            const std::string t = slurp(x.dir + "/run/telemetry/rank_00001.jsonl");
            return t.find("\"type\":\"step\"") != std::string::npos
                       ? ""
                       : "no step ran before the refusal; move the bad id";
          }),
      row(
          "llm.c shard shorter than its header",
          [=](Ctx& x) {
            test::write_bytes(x.dir + "/short.bin",
                              test::llmc_bytes(ids(5000), false).substr(0, 600));
            return layout(x.dir + "/short.bin");
          },
          {"short.bin", "byte offset 600", "truncated", "1024-byte header"}, 2, no_run),
      row(
          "llm.c shard with a wrong magic",
          [=](Ctx& x) {
            test::write_bytes(x.dir + "/magic.bin", test::llmc_bytes(ids(5000), false, 20240521));
            return layout(x.dir + "/magic.bin", " --set data.format=llmc");
          },
          {"magic.bin", "byte offset 0", "bad magic 20240521"}, 2, no_run),
      row(
          "llm.c shard with a wrong version",
          [=](Ctx& x) {
            test::write_bytes(x.dir + "/ver.bin", test::llmc_bytes(ids(5000), false, 0, 3));
            return layout(x.dir + "/ver.bin");
          },
          {"ver.bin", "byte offset 4", "version 3", "writes version 1"}, 2, no_run),
      row(
          "llm.c shard whose token count disagrees with its size",
          [=](Ctx& x) {
            test::write_bytes(x.dir + "/count.bin",
                              test::llmc_bytes(ids(5000), true).substr(0, 1024 + 4 * 4000));
            return layout(x.dir + "/count.bin");
          },
          {"count.bin", "byte offset 8", "5000", "should have 21024 bytes"}, 2, no_run),
      row(
          "Megatron index with a dtype code out of range",
          [=](Ctx& x) {
            test::write_megatron(x.dir + "/meg", ids(5000), 8);
            std::string idx = slurp(x.dir + "/meg.idx");
            idx[17] = 9;
            test::write_bytes(x.dir + "/meg.idx", idx);
            return layout(x.dir + "/meg");
          },
          {"meg.idx", "byte offset 17", "dtype code 9", "out of range"}, 2, no_run),
      row(
          "data.format=megatron without an index",
          [=](Ctx& x) {
            write_tokens(x.dir + "/plain.bin", 5000);
            return layout(x.dir + "/plain.bin", " --set data.format=megatron");
          },
          {"plain.bin.idx", "no Megatron index"}, 2, no_run),
      row(
          "folder of shards with mixed dtypes",
          [=](Ctx& x) {
            fs::create_directories(x.dir + "/shards");
            test::write_bytes(x.dir + "/shards/a.bin", test::llmc_bytes(ids(5000), false));
            test::write_bytes(x.dir + "/shards/b.bin", test::llmc_bytes(ids(5000), true));
            return trainer(1, tiny() + file + x.dir + "/shards --set runtime.cpu_peak_gflops=1" +
                                  " --out " + x.dir + "/run");
          },
          {"b.bin' is llmc uint32", "a.bin' is llmc uint16", "first shard"}, 2, no_run),
      row("data.path is a FIFO (would block)",
          [=](Ctx& x) {
            ::mkfifo((x.dir + "/fifo.bin").c_str(), 0644);
            return data(x.dir + "/fifo.bin");
          },
          {"fifo.bin", "FIFO", "not a regular file"}),
      row(
          "train.eval_interval without data.val_path",
          [=](Ctx& x) {
            write_tokens(x.dir + "/t.bin", 5000);
            return layout(x.dir + "/t.bin", " --set train.eval_interval=5");
          },
          {"train.eval_interval=5", "data.val_path"}, 2, no_run),
      row(
          "data.val_path without train.eval_interval",
          [=](Ctx& x) {
            write_tokens(x.dir + "/t.bin", 5000);
            return layout(x.dir + "/t.bin", " --set data.val_path=" + x.dir + "/t.bin");
          },
          {"data.val_path", "train.eval_interval=0", "never be read"}, 2, no_run),
      row(
          "data.val_path is a damaged llm.c shard",
          [=](Ctx& x) {
            write_tokens(x.dir + "/t.bin", 5000);
            test::write_bytes(x.dir + "/val.bin",
                              test::llmc_bytes(ids(5000), false).substr(0, 1024 + 2 * 4000));
            return layout(x.dir + "/t.bin",
                          " --set train.eval_interval=5 --set data.val_path=" + x.dir + "/val.bin");
          },
          {"data.val_path", "val.bin", "byte offset 8"}, 2, no_run),
      row("data.path is a folder without shards", [=](Ctx& x) { return data(x.dir); },
          {"a folder", "no *.bin"}),
      row("sidecar vocab_size is a list",
          [=](Ctx& x) { return data(with_sidecar(x, R"({"vocab_size":[256]})")); },
          {"t.bin.json", "vocab_size", "integer", "[256]"}),
      row("sidecar dtype is a number",
          [=](Ctx& x) { return data(with_sidecar(x, R"({"dtype":7})")); },
          {"t.bin.json", "dtype", "\"uint16\" or \"uint32\"", "7"}),
      row("sidecar n_tokens is a string",
          [=](Ctx& x) { return data(with_sidecar(x, R"({"n_tokens":"5000"})")); },
          {"t.bin.json", "n_tokens", "\"5000\""}),
      row("sidecar is a list", [=](Ctx& x) { return data(with_sidecar(x, "[1, 2]")); },
          {"t.bin.json", "JSON object"}),
      row("sidecar is not JSON", [=](Ctx& x) { return data(with_sidecar(x, "{dtype: uint16")); },
          {"t.bin.json", "not valid JSON"}),
  };
}

std::vector<Case> checkpoint_rows() {
  auto damaged = [](const std::function<void(nlohmann::json&)>& f, const std::string& step) {
    return [f, step](Ctx& x) {
      edit_json(run_copy(x) + step + "/index.json", f);
      return resume(x, x.dir + "/run" + step);
    };
  };
  std::vector<Case> v = {
      row("index shard offset is []",
          damaged([](nlohmann::json& j) { first_shard(j)["offset"] = nlohmann::json::array(); },
                  kStep6),
          {"step_00000006/index.json", "offset", "got []"}),
      row("index shard offset is a number where a list is expected",
          damaged([](nlohmann::json& j) { first_shard(j)["offset"] = 3; }, kStep6),
          {"index.json", "offset", "expected a list"}),
      row("index step is a list",
          damaged([](nlohmann::json& j) { j["step"] = nlohmann::json::array({6}); }, kStep6),
          {"index.json", "field 'step'", "[6]"}),
      row("index file name is a number",
          damaged([](nlohmann::json& j) { j["files"][0]["file"] = 12; }, kStep6),
          {"index.json", "files[0].file", "expected a string", "12"}),
      row("index shard names a file of another folder",
          damaged(
              [](nlohmann::json& j) { first_shard(j)["file"] = "../step_00000003/rank_00000.h5"; },
              kStep6),
          {"index.json", "shards[0].file", "not one of the rank files"}),
      row("index shards outside the tensor",
          damaged([](nlohmann::json& j) { first_shard(j)["offset"][0] = 1000000; }, kStep6),
          {"index.json", "lies outside the global shape"}),
      row("index copied from another step",
          [](Ctx& x) {
            const std::string r = run_copy(x);
            step3_into_step6(r, {"/index.json"});
            return resume(x, r + kStep6);
          },
          {"step_00000006/index.json", "field 'step' is 3", "the folder is step 6"}),
      row("index bound to another step's rank files",
          [](Ctx& x) {
            const std::string r = run_copy(x);
            step3_into_step6(r, {"/rank_00000.h5", "/rank_00001.h5"});
            return resume(x, r + kStep6);
          },
          // (a resume checks the metadata's CRC32C first: format /3)
          {"step_00000006/rank_00000.h5", "metadata checksum mismatch", "another checkpoint's"}),
      row("index re-checksummed for another step's rank files",
          [](Ctx& x) {
            // Step 3's files with step 3's sizes and checksums in step 6's
            // index: only the files' own step attribute can tell.
            const std::string r = run_copy(x);
            step3_into_step6(r, {"/rank_00000.h5", "/rank_00001.h5"});
            const auto files3 = nlohmann::json::parse(slurp(r + kStep3 + "/index.json"))["files"];
            edit_json(r + kStep6 + "/index.json", [&](nlohmann::json& j) { j["files"] = files3; });
            return resume(x, r + kStep6);
          },
          {"step_00000006/rank_00000.h5", "written at step 3", "index.json' is step 6"}),
  };
  // One rank's file cut short: rank 0, whose message the user reads first,
  // carries rank 1's reason rather than "see its message".
  v.push_back(row("explicit resume with one rank file truncated names that rank's reason",
                  [](Ctx& x) {
                    const std::string r = run_copy(x);
                    std::filesystem::resize_file(r + kStep6 + "/rank_00001.h5", 100);
                    return resume(x, r + kStep6);
                  },
                  {"rank 1 failed its setup checks: ", "rank_00001.h5"}));
  // checkpoint.resume=auto: a damaged newest index is named and skipped.
  Case fb = row(
      "auto resume falls back past a mistyped index",
      [](Ctx& x) {
        edit_json(run_copy(x) + kStep6 + "/index.json",
                  [](nlohmann::json& j) { j["world_size"] = "2"; });
        return resume(x, "auto");
      },
      {"step_00000006/index.json", "world_size", "\"2\"", "resumed from"}, 0);
  fb.check = [](Ctx& x, const RunResult& r) {
    return r.output.find("resumed from " + x.dir + "/run" + kStep3) != std::string::npos
               ? ""
               : "did not resume from step 3";
  };
  v.push_back(fb);
  // Every index unreadable, rank files intact: auto must not start over them.
  Case all = row(
      "auto resume with every index unreadable refuses",
      [](Ctx& x) {
        const std::string r = run_copy(x);
        put(r + kStep3 + "/index.json", "{");
        put(r + kStep6 + "/index.json", "[]");
        put(x.dir + "/before.txt", snapshot(r + "/checkpoints"));
        return resume(x, "auto");
      },
      {"checkpoint.dir", "step_00000006, step_00000003", "not loadable", "nothing was started"});
  all.check = unchanged("/run/checkpoints");
  v.push_back(all);
  Case none = row("resume=none over committed steps refuses",
                  [](Ctx& x) {
                    const std::string r = run_copy(x);
                    put(x.dir + "/before.txt", snapshot(r + "/checkpoints"));
                    return resume(x, "none");
                  },
                  {"checkpoint.dir", "already holds committed checkpoints", "step_00000006"});
  none.check = unchanged("/run/checkpoints");
  v.push_back(none);
  Case older = row(
      "resume from an older step keeps the newer one beside",
      [](Ctx& x) { return resume(x, run_copy(x) + kStep3); },
      {"step_00000006 already existed", "kept it as", "step_00000006.replaced-1"}, 0);
  older.check = [](Ctx& x, const RunResult&) {
    const std::string aside = x.dir + "/run" + kStep6 + ".replaced-1";
    if (!fs::exists(aside + "/rank_00001.h5")) return std::string("the old step 6 is gone");
    return slurp(aside + "/index.json") == slurp(x.fixture + kStep6 + "/index.json")
               ? std::string()
               : std::string("the old step 6 was changed");
  };
  v.push_back(older);
  v.push_back(row("checkpoint.dir cannot be created (noticed at start)",
                  [](Ctx& x) {
                    put(x.dir + "/blocker", "a file where a folder should be");
                    return trainer(2, quick(x.dir + "/run") + " --set checkpoint.dir=" + x.dir +
                                          "/blocker/ckpt");
                  },
                  {"checkpoint.dir", "blocker/ckpt", "cannot create"}));
  return v;
}

std::vector<Case> run_folder_rows() {
  // A second job on a run folder that a first job is using.
  Case two = row("second job on the same run folder",
                 [](Ctx& x) {
                   const std::string out = x.dir + "/run";
                   auto r = run_cmd(bin() + quick(out) + " --set train.steps=100000 > " + x.dir +
                                    "/first.log 2>&1 & echo $!");
                   x.background = std::stoi(r.output);
                   for (int i = 0; i < 600 && read_series(out, 0, "loss").size() < 2; ++i)
                     ::usleep(50000);
                   return trainer(1, quick(out));
                 },
                 {"run folder", "/run' is in use by another job", "pid", "runtime.out"});
  two.check = [](Ctx& x, const RunResult& r) {
    // The message names the first job; it goes on untouched, then stops
    // cleanly on SIGUSR1 with its checkpoint.
    if (r.output.find("pid " + std::to_string(x.background)) == std::string::npos)
      return std::string("the first job's pid is not named");
    ::kill(x.background, SIGUSR1);
    for (int i = 0; i < 600 && ::kill(x.background, 0) == 0; ++i) ::usleep(50000);
    x.background = 0;
    const std::string log = slurp(x.dir + "/first.log");
    return log.find("emergency checkpoint committed") != std::string::npos
               ? std::string()
               : "the first job did not end cleanly:\n" + log;
  };
  Case utf =
      row("run name not UTF-8 writes nothing",
          [](Ctx& x) { return trainer(1, quick(x.dir + "/run") + " --set 'runtime.name=\xc3'"); },
          {"runtime.name", "not valid UTF-8"});
  utf.check = [](Ctx& x, const RunResult&) {
    return fs::exists(x.dir + "/run") ? "the run folder was created" : "";
  };
  Case mem = row(
      "model far beyond this machine's memory",
      [](Ctx& x) { return trainer(1, quick(x.dir + "/run") + " --set model.preset=llama-70b"); },
      {"not enough memory", "rank 0 needs about", "GiB", "are available", "parallel.zero_stage"});
  mem.check = [](Ctx& x, const RunResult&) {
    return fs::exists(x.dir + "/run/run.json") ? "run.json was written" : "";
  };
  return {two, utf, mem};
}

// scaletrain-analyze on a damaged copy of the fixture's telemetry.
std::vector<Case> analyze_rows() {
  auto rank0 = [](const std::string& r) { return r + "/telemetry/rank_00000.jsonl"; };
  // Replaces field `key` of step `step`'s record in a rank file.
  auto set_step_field = [](const std::string& path, int step, const std::string& key,
                           nlohmann::json v) {
    std::ifstream in(path);
    std::string line, out;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.value("type", "") == "step" && j.value("step", 0) == step) {
        j[key] = v;
        line = j.dump();
      }
      out += line + "\n";
    }
    put(path, out);
  };
  auto all_steps = [set_step_field](const std::string& path, const std::string& key,
                                    nlohmann::json v) {
    for (int s = 1; s <= 6; ++s) set_step_field(path, s, key, v);
  };
  return {
      row("analyze: negative phase time",
          [=](Ctx& x) {
            const std::string r = run_copy(x);
            set_step_field(rank0(r), 4, "fwd_s", -0.5);
            return analyze("run " + r + " --no-plots");
          },
          {"rank_00000.jsonl:", "field 'fwd_s'", "must be a finite duration >= 0"}),
      row("analyze: a rank file from another run",
          [=](Ctx& x) {
            const std::string r = run_copy(x);
            edit_json(r + "/run.json", [](nlohmann::json& j) { j["run_id"] = "0123456789abcdef"; });
            return analyze("run " + r + " --no-plots");
          },
          {"rank_00000.jsonl:1", "field 'run_id'", "0123456789abcdef", "another run"}),
      row("analyze: world_size beyond int range",
          [=](Ctx& x) {
            const std::string r = run_copy(x);
            edit_json(r + "/run.json", [](nlohmann::json& j) { j["world_size"] = 4294967298ll; });
            return analyze("run " + r + " --no-plots");
          },
          {"run.json", "field 'world_size'", "4294967298"}),
      row("analyze: world_size far beyond the rank files",
          [=](Ctx& x) {
            const std::string r = run_copy(x);
            edit_json(r + "/run.json", [](nlohmann::json& j) { j["world_size"] = 1000000; });
            return analyze("run " + r + " --no-plots");
          },
          {"run.json", "field 'world_size'", "1000000 ranks", "2 rank file(s)"}),
      row("analyze: --peak-flops nan",
          [](Ctx& x) { return analyze("run " + run_copy(x) + " --peak-flops nan"); },
          {"--peak-flops", "'nan'", "finite"}),
      row("analyze: --warmup longer than the run",
          [](Ctx& x) { return analyze("run " + run_copy(x) + " --warmup 50"); },
          {"--warmup 50", "recorded only 6 step(s)"}),
      row("analyze trace: --steps backwards",
          [](Ctx& x) { return analyze("trace " + run_copy(x) + " --steps 5..3"); },
          {"--steps", "'5..3'", "after the last"}),
      row("analyze trace: a rank without trace records",
          [=](Ctx& x) {
            const std::string r = run_copy(x);
            std::ifstream in(rank0(r));
            std::string line, out;
            while (std::getline(in, line))
              if (line.find("\"type\":\"trace\"") == std::string::npos) out += line + "\n";
            put(rank0(r), out);
            return analyze("trace " + r);
          },
          {"rank_00000.jsonl", "no trace records", "runtime.trace"}),
      row("analyze hang: a run that ended normally",
          [](Ctx& x) { return analyze("hang " + run_copy(x)); },
          {"/flight", "no flight recorder dumps"}),
      row("analyze hang: a damaged dump",
          [](Ctx& x) {
            const std::string r = run_copy(x);
            std::filesystem::create_directories(r + "/flight");
            put(r + "/flight/rank_00001.json", "{\"rank\":");
            return analyze("hang " + r);
          },
          {"rank_00001.json", "not a flight recorder dump"}),
      row("analyze: all step times zero",
          [=](Ctx& x) {
            const std::string r = run_copy(x);
            all_steps(rank0(r), "step_s", 0.0);
            all_steps(r + "/telemetry/rank_00001.jsonl", "step_s", 0.0);
            return analyze("run " + r + " --no-plots");
          },
          {"median step time (step_s)", "is 0"}),
  };
}

// scaletrain-convert beside the trainer, under a timeout.
std::string convert(const std::string& args) {
  return "timeout -k 10 120 " + (fs::path(bin()).parent_path() / "scaletrain-convert").string() +
         " " + args;
}

// The fixture's step 6 exported to x.dir/hf (fp32, one model.safetensors).
std::string hf_folder(Ctx& x) {
  const std::string hf = x.dir + "/hf";
  const RunResult r = run_cmd(convert("export --from " + x.fixture + kStep6 + " --out " + hf));
  if (r.exit_code != 0) return "/export-failed: " + r.output;
  return hf;
}

// A run started from a damaged Hugging Face folder: refused before its run
// folder exists.
Case init_row(std::string name, std::function<void(const std::string& hf)> damage,
              std::vector<std::string> expect) {
  return row(
      std::move(name),
      [damage](Ctx& x) {
        const std::string hf = hf_folder(x);
        damage(hf);
        return trainer(1, quick(x.dir + "/out") + " --set model.init_from=" + hf);
      },
      std::move(expect), 2,
      [](Ctx& x, const RunResult&) {
        return fs::exists(x.dir + "/out") ? "the run folder was created" : "";
      });
}

std::vector<Case> convert_rows() {
  return {
      init_row("init_from folder of another shape",
               [](const std::string& hf) {
                 edit_json(hf + "/config.json", [](nlohmann::json& j) { j["hidden_size"] = 128; });
               },
               {"model.init_from", "/hf/config.json", "hidden_size is 128", "model.d_model is 64"}),
      init_row("init_from safetensors file truncated",
               [](const std::string& hf) {
                 fs::resize_file(hf + "/model.safetensors",
                                 fs::file_size(hf + "/model.safetensors") / 2);
               },
               {"model.init_from", "/hf/model.safetensors", "truncated"}),
      init_row("init_from tensor missing from the index",
               [](const std::string& hf) {
                 edit_json(hf + "/model.safetensors.index.json", [](nlohmann::json& j) {
                   j["weight_map"].erase("model.layers.1.mlp.up_proj.weight");
                 });
               },
               {"model.init_from", "model.safetensors.index.json",
                "tensor 'model.layers.1.mlp.up_proj.weight'", "layers.1.feed_forward.w3.weight",
                "is missing", "[128,64]"}),
      init_row("init_from tensor of another dtype",
               [](const std::string& hf) {
                 // Same byte count: the F32 embedding relabelled I32.
                 std::string b = slurp(hf + "/model.safetensors");
                 const auto at = b.find("\"dtype\":\"F32\"");
                 if (at != std::string::npos) b.replace(at, 13, "\"dtype\":\"I32\"");
                 put(hf + "/model.safetensors", b);
               },
               {"model.init_from", "/hf/model.safetensors", "has dtype I32",
                "expected F32, BF16 or F16"}),
      row("init_from folder that does not exist",
          [](Ctx& x) {
            return trainer(1, quick(x.dir + "/out") + " --set model.init_from=" + x.dir + "/nope");
          },
          {"model.init_from", "/nope' is not a folder"}),
      row("export with an unknown dtype",
          [](Ctx& x) {
            return convert("export --from " + x.fixture + " --out " + x.dir + "/hf --dtype fp16");
          },
          {"--dtype", "'fp16'", "fp32 or bf16"}),
      row("check a folder against another model",
          [](Ctx& x) {
            return convert("check " + hf_folder(x) + tiny() + " --set model.n_layers=3");
          },
          {"/hf/config.json", "num_hidden_layers is 2", "model.n_layers is 3"}),
      row("export with a misspelt option",
          [](Ctx& x) {
            return convert("export --from " + x.fixture + " --out " + x.dir + "/hf --dtyp bf16");
          },
          {"unknown option '--dtyp'", "did you mean '--dtype'"}),
      row(
          "export onto a folder that holds files",
          [](Ctx& x) {
            put(x.dir + "/keep.txt", "mine");
            return convert("export --from " + x.fixture + " --out " + x.dir);
          },
          {"--out", "not an empty folder"}, 2,
          [](Ctx& x, const RunResult&) {
            return slurp(x.dir + "/keep.txt") == "mine" ? "" : "keep.txt changed";
          }),
      row("export with a config of another model",
          [](Ctx& x) {
            return convert("export --from " + x.fixture + " --out " + x.dir + "/hf" + tiny() +
                           " --set model.n_layers=3");
          },
          {"holds the model", "\"n_layers\":2", "\"n_layers\":3"}),
  };
}

}  // namespace

std::vector<Case> file_cases() {
  std::vector<Case> all;
  for (auto part :
       {data_rows(), checkpoint_rows(), run_folder_rows(), analyze_rows(), convert_rows()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

}  // namespace st::test::bad

// Bad input never crashes, never hangs and is never accepted silently: every
// row of the table (bad_input.hpp) runs the real scaletrain or
// scaletrain-analyze and must exit with its status (2 for bad input) and a
// message naming the culprit, with nothing already written lost. Rows run
// three at a time (most of a row is MPI start-up latency); timing-sensitive
// rows run alone afterwards. One failure report per row.
// SCALETRAIN_BAD_INPUT_ROWS=TEXT runs only the rows whose name contains TEXT
// (for working on a few rows; CI runs them all).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "bad_input.hpp"

namespace fs = std::filesystem;

namespace st::test::bad {

std::string trainer(int ranks, const std::string& args) {
  // A hang is a failure too: the timeout turns it into exit 124.
  std::string cmd = "timeout -k 10 240 ";
  if (ranks > 1)
    cmd += mpiexec() + " --oversubscribe --bind-to none -n " + std::to_string(ranks) + " ";
  return cmd + bin() + " " + args;
}

std::string analyze(const std::string& args) {
  return "timeout -k 10 120 " + env_or("SCALETRAIN_ANALYZE", "scaletrain-analyze") + " " + args;
}

std::string tiny() { return " --config " + src_dir() + "/configs/models/tiny.yaml"; }

std::string quick(const std::string& out) {
  return tiny() +
         " --set train.steps=6 --set checkpoint.interval=3 --set runtime.cpu_peak_gflops=1 "
         "--out " +
         out;
}

void put(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void copy_tree(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
}

std::string snapshot(const std::string& dir) {
  std::vector<std::string> lines;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat sb;
    ::stat(e.path().c_str(), &sb);
    lines.push_back(e.path().string() + " " + std::to_string(sb.st_size) + " " +
                    std::to_string(sb.st_mtim.tv_sec) + "." + std::to_string(sb.st_mtim.tv_nsec));
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (auto& l : lines) out += l + "\n";
  return out;
}

void edit_json(const std::string& path, const std::function<void(nlohmann::json&)>& f) {
  auto j = nlohmann::json::parse(slurp(path));
  f(j);
  put(path, j.dump(1));
}

namespace {

struct Outcome {
  std::string skipped;  // reason, when not run
  std::string command;
  RunResult r;
  std::string extra;  // the row's own check
};

Outcome run_row(const Case& c, const std::string& root, const std::string& fixture, int index) {
  Outcome o;
  if (c.skip_if) o.skipped = c.skip_if();
  if (!o.skipped.empty()) return o;
  Ctx x{root + "/row-" + std::to_string(index), fixture};
  fs::create_directories(x.dir);
  o.command = c.command(x);
  o.r = run_cmd(o.command);
  if (c.check) o.extra = c.check(x, o.r);
  if (x.background > 0) ::kill(x.background, SIGKILL);  // a row that did not end its job
  fs::remove_all(x.dir);
  return o;
}

// The rows' shared run: 2 ranks, 6 steps, checkpoints at 3 and 6.
std::string make_fixture(const std::string& root) {
  const std::string out = root + "/fixture";
  auto r = run_cmd(trainer(2, quick(out)));
  if (r.exit_code != 0) ADD_FAILURE() << "fixture run failed:\n" << r.output;
  return out;
}

}  // namespace

TEST(BadInput, EveryRowIsRefusedWithAClearMessage) {
  const std::string root = fresh_dir("bad");
  const std::string fixture = make_fixture(root);
  std::vector<Case> rows;
  const std::string only = env_or("SCALETRAIN_BAD_INPUT_ROWS", "");
  for (auto part : {config_cases(), file_cases(), fault_cases()})
    for (auto& c : part)
      if (c.name.find(only) != std::string::npos) rows.push_back(c);
  ASSERT_FALSE(rows.empty()) << "no row's name contains SCALETRAIN_BAD_INPUT_ROWS='" << only << "'";
  std::vector<Outcome> out(rows.size());

  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < rows.size();)
      if (!rows[i].alone) out[i] = run_row(rows[i], root, fixture, int(i));
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < 3; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].alone) out[i] = run_row(rows[i], root, fixture, int(i));

  int skipped = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Case& c = rows[i];
    const Outcome& o = out[i];
    SCOPED_TRACE("row " + std::to_string(i) + ": " + c.name);
    if (!o.skipped.empty()) {
      ++skipped;
      std::printf("[ SKIPPED  ] %s: %s\n", c.name.c_str(), o.skipped.c_str());
      continue;
    }
    const std::string ctx = "\ncommand: " + o.command + "\noutput:\n" + o.r.output;
    EXPECT_EQ(o.r.term_signal, 0) << "crashed" << ctx;
    EXPECT_EQ(o.r.exit_code, c.exit_code) << ctx;
    for (const auto& e : c.expect)
      EXPECT_NE(o.r.output.find(e), std::string::npos) << "should name '" << e << "'" << ctx;
    for (const char* bad : {"terminate called", "Segmentation fault", "std::bad_alloc",
                            "AddressSanitizer", "runtime error:", "[json.exception.type_error"})
      EXPECT_EQ(o.r.output.find(bad), std::string::npos) << "'" << bad << "' in the output" << ctx;
    EXPECT_EQ(o.extra, "") << ctx;
  }
  std::printf("%zu rows, %d skipped\n", rows.size(), skipped);
  fs::remove_all(root);
}

}  // namespace st::test::bad

// docs/data.md says how a batch is chosen, with a Python snippet that
// reproduces it. This test runs that snippet (taken from the page itself)
// against the loader's own samples, file and synthetic, so the page cannot
// drift from lib/data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "data/data.hpp"
#include "scaletrain/build_config.hpp"

namespace {
std::string run(const std::string& cmd, int& rc) {
  std::string out;
  std::FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}
}  // namespace

TEST(SamplerDoc, ThePythonInDocsDataMdReproducesTheLoader) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("st_sampler_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bin = (dir / "t.bin").string();
  {
    std::ofstream o(bin, std::ios::binary);
    for (int i = 0; i < 1000; ++i) {
      const uint16_t t = uint16_t((i * 37 + i / 7) % 250);
      o.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  const int S = 16;
  const uint64_t seed = 987654321;
  std::ostringstream want;
  auto src = st::make_file_source(bin, "uint16", seed, 256, S);
  auto syn = st::make_synthetic_source(seed, 256);
  std::vector<int32_t> out(S + 1);
  for (uint64_t i : {0ull, 1ull, 2ull, 99ull, 123456789ull}) {
    src->sample(i, S, out.data());
    for (int t : out) want << t << ' ';
    want << '\n';
    syn->sample(i, S, out.data());
    for (int t : out) want << t << ' ';
    want << '\n';
  }

  // The page's Python block, then a driver that prints the same samples.
  std::ifstream md(std::string(SCALETRAIN_SOURCE_DIR) + "/docs/data.md");
  std::stringstream ss;
  ss << md.rdbuf();
  const std::string page = ss.str();
  const size_t a = page.find("```python\n"), b = page.find("```", a + 10);
  ASSERT_NE(a, std::string::npos) << "docs/data.md has no python block";
  std::string code = page.substr(a + 10, b - a - 10);
  const std::string path_in_doc = "\"data/corpus.bin\"";
  ASSERT_NE(code.find(path_in_doc), std::string::npos);
  code.replace(code.find(path_in_doc), path_in_doc.size(), "\"" + bin + "\"");
  code += "import sys\nseed, S = " + std::to_string(seed) + ", " + std::to_string(S) + "\n" +
          "for i in (0, 1, 2, 99, 123456789):\n"
          "    x, y = sample(seed, i, S)\n"
          "    print(' '.join(str(int(t)) for t in list(x) + [y[-1]]), '')\n"
          "    state, row = mix(seed, i), []\n"
          "    for _ in range(S + 1):\n"
          "        state, z = splitmix64(state)\n"
          "        row.append(z % 256)\n"
          "    print(' '.join(map(str, row)), '')\n";
  std::ofstream((dir / "doc.py").string()) << code;
  const char* py = std::getenv("SCALETRAIN_PYTHON");
  int rc = 0;
  const std::string have =
      run(std::string(py ? py : "python3") + " " + (dir / "doc.py").string() + " 2>&1", rc);
  fs::remove_all(dir);
  if (rc != 0 && have.find("No module named 'numpy'") != std::string::npos)
    GTEST_SKIP() << "numpy not installed";
  ASSERT_EQ(rc, 0) << have;
  EXPECT_EQ(have, want.str());
}

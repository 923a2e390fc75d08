// bench_gemm_cpu (not a test): the CPU GEMM paths at a model's linear-layer
// shapes, measured in the same run as interleaved repetitions: fp32 through
// OpenBLAS (what Ops::gemm runs) and through oneDNN's matmul (the
// alternative; the fp32 path stays on whichever measures faster), bf16
// through oneDNN and through the widening fallback. Per layer: the forward
// (x W^T), the input gradient (dy W, bf16 out) and the weight gradient
// (dy^T x added into fp32). Prints GFLOP/s (median of the repetitions) and
// the ratios to OpenBLAS fp32, with the implementation oneDNN chose.
// Usage: bench_gemm_cpu [ROWS D FFN VOCAB [REPS]]   (default: the d384 shape
// of scripts/bench-cpu.sh, 2048 rows, d 384, ffn 1024, vocab 8192)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "tensor/dtype.hpp"

namespace k = st::kernels;
namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  std::string name;
  bool ta, tb;
  int64_t M, N, K;
  bool c_bf16;
  float beta;
};

// oneDNN fp32 matmul of one shape (row-major, op() by strides).
struct OneDnnF32 {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul mm;
  dnnl::memory::desc a, b, c;
  std::string impl;
  explicit OneDnnF32(const Shape& s) {
    using d = dnnl::memory::dims;
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    a = dnnl::memory::desc({s.M, s.K}, dnnl::memory::data_type::f32, s.ta ? d{1, lda} : d{lda, 1});
    b = dnnl::memory::desc({s.K, s.N}, dnnl::memory::data_type::f32, s.tb ? d{1, ldb} : d{ldb, 1});
    c = dnnl::memory::desc({s.M, s.N}, dnnl::memory::data_type::f32, d{s.N, 1});
    dnnl::primitive_attr attr;
    if (s.beta != 0.f) {
      dnnl::post_ops po;
      po.append_sum(s.beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, eng);
    impl = pd.impl_info_str();
    mm = dnnl::matmul(pd);
  }
  void run(const float* A, const float* B, float* C) {
    dnnl::memory ma(a, eng, const_cast<float*>(A)), mb(b, eng, const_cast<float*>(B)),
        mc(c, eng, C);
    mm.execute(strm, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    strm.wait();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 4 ? std::atoll(argv[1]) : 2048,
                d = argc > 4 ? std::atoll(argv[2]) : 384,
                ffn = argc > 4 ? std::atoll(argv[3]) : 1024,
                vocab = argc > 4 ? std::atoll(argv[4]) : 8192;
  const int reps = argc > 5 ? std::max(1, std::atoi(argv[5])) : 7;
  std::vector<Shape> shapes;
  for (auto [name, out, in] : {std::tuple<const char*, int64_t, int64_t>{"qkvo", d, d},
                               {"ffn up", ffn, d},
                               {"ffn down", d, ffn},
                               {"lm head", vocab, d}}) {
    shapes.push_back({std::string(name) + " fwd", false, true, rows, out, in, true, 0.f});
    shapes.push_back({std::string(name) + " dgrad", false, false, rows, in, out, true, 0.f});
    shapes.push_back({std::string(name) + " wgrad", true, false, out, in, rows, false, 1.f});
  }
  std::printf("bf16 GEMM: %s\nfp32 GEMM: %s\n", k::gemm_bf16_library().c_str(),
              k::gemm_library().c_str());
  std::printf("rows %lld, d %lld, ffn %lld, vocab %lld; %d interleaved repetitions, median\n\n",
              (long long)rows, (long long)d, (long long)ffn, (long long)vocab, reps);
  std::printf(
      "| shape | M x N x K | OpenBLAS fp32 | oneDNN fp32 | oneDNN bf16 | widened bf16 | "
      "oneDNN fp32 / OpenBLAS | oneDNN bf16 / OpenBLAS fp32 | oneDNN fp32 impl |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  double tot[4] = {0, 0, 0, 0};
  for (const Shape& s : shapes) {
    std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N), 0.f);
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
    std::vector<uint16_t> Ah(A.size()), Bh(B.size()), Ch(C.size(), 0);
    for (size_t i = 0; i < A.size(); ++i) Ah[i] = st::f32_to_bf16(A[i]);
    for (size_t i = 0; i < B.size(); ++i) Bh[i] = st::f32_to_bf16(B[i]);
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    void* cb = s.c_bf16 ? static_cast<void*>(Ch.data()) : static_cast<void*>(C.data());
    OneDnnF32 f32(s);
    const std::vector<std::function<void()>> paths = {
        [&] {
          k::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, s.beta, C.data(),
                  s.N);
        },
        [&] { f32.run(A.data(), B.data(), C.data()); },
        [&] {
          if (k::gemm_bf16_native())
            k::gemm_bf16_onednn(s.ta, s.tb, s.M, s.N, s.K, 1.f, Ah.data(), lda, Bh.data(), ldb,
                                s.beta, cb, s.N, s.c_bf16);
        },
        [&] {
          k::gemm_bf16_widened(s.ta, s.tb, s.M, s.N, s.K, 1.f, Ah.data(), lda, Bh.data(), ldb,
                               s.beta, cb, s.N, s.c_bf16);
        }};
    std::vector<double> t[4];
    for (int r = 0; r <= reps; ++r)
      for (size_t p = 0; p < paths.size(); ++p) {
        const double t0 = now();
        paths[p]();
        if (r > 0) t[p].push_back(now() - t0);  // the first round warms up
      }
    const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
    double gf[4];
    for (int p = 0; p < 4; ++p) {
      gf[p] = flop / median(t[p]) / 1e9;
      tot[p] += median(t[p]);
    }
    const bool native = k::gemm_bf16_native();
    std::printf("| %s | %lld x %lld x %lld | %.1f | %.1f | %s | %.1f | %.2f | %s | %s |\n",
                s.name.c_str(), (long long)s.M, (long long)s.N, (long long)s.K, gf[0], gf[1],
                native ? std::to_string(gf[2]).substr(0, 6).c_str() : "n/a", gf[3], gf[1] / gf[0],
                native ? std::to_string(gf[2] / gf[0]).substr(0, 5).c_str() : "n/a",
                f32.impl.c_str());
  }
  std::printf(
      "\nall shapes, seconds (median per shape, summed): OpenBLAS fp32 %.4f, oneDNN fp32 "
      "%.4f, oneDNN bf16 %.4f, widened bf16 %.4f\n",
      tot[0], tot[1], tot[2], tot[3]);
  return 0;
}

// bf16 GEMM through oneDNN's matmul (cpu_kernels.hpp gemm_bf16_onednn):
// bf16 x bf16 with fp32 accumulation, alpha as the output scale and beta * C
// as a sum post-op, so a bf16 C is rounded once, after both. oneDNN picks
// the instruction set itself (AMX, AVX512-BF16); gemm_bf16_native() says
// whether that set multiplies bf16 in hardware, which is when gemm_bf16 uses
// this file. Primitives are built once per shape (a process-wide cache) and
// run with a per-thread scratchpad, so several threads (OpenMP teams, the
// strict device's stream workers) may run them at once; oneDNN runs on the
// caller's OpenMP pool, the one the project's own kernels use (inside an
// OpenMP team it runs on the calling thread). Compiled when the build has
// oneDNN (cmake/onednn.cmake); gemm_onednn_off.cpp otherwise.
//
// Two oneDNN APIs, one code path each (make_matmul, run_matmul): 2.6-2.7
// (matmul::desc, alpha as the output scale) and 3.x (the primitive_desc takes
// the memory descs; alpha is the weights' scale, DNNL_ARG_ATTR_SCALES at
// execution). Both compute C = alpha * op(A) op(B) + beta * C, rounded once.
// The onednn3_syntax test (ctest/model) compiles this file against 3.x headers.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "tensor/dtype.hpp"

#if DNNL_VERSION_MAJOR == 2 && DNNL_VERSION_MINOR >= 6
#define ST_ONEDNN_API 2
#elif DNNL_VERSION_MAJOR == 3
#define ST_ONEDNN_API 3
#else
#error "gemm_onednn.cpp supports oneDNN 2.6-2.7 and 3.x (cmake/onednn.cmake)"
#endif

namespace st::kernels {
namespace {
using dt = dnnl::memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One matmul for one shape, layout, output type, alpha and beta.
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                       float, float>;
struct Prim {
  dnnl::memory::desc a, b, c, scratch;
  dnnl::matmul mm;
  std::string impl;
  float alpha = 1.f;  // 3.x: the weights' scale, handed over at execution
};

// The matmul's primitive_desc: alpha scales the product, then the sum post-op
// adds beta * C.
dnnl::matmul::primitive_desc make_matmul(const Prim& p, float beta) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
#if ST_ONEDNN_API == 2
  if (p.alpha != 1.f) attr.set_output_scales(0, {p.alpha});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.a, p.b, p.c), attr, cpu_engine());
#else
  if (p.alpha != 1.f) attr.set_scales_mask(DNNL_ARG_WEIGHTS, 0);  // one scale for all
  return dnnl::matmul::primitive_desc(cpu_engine(), p.a, p.b, p.c, attr);
#endif
}

void run_matmul(const Prim& p, dnnl::stream& s, dnnl::memory& a, dnnl::memory& b, dnnl::memory& c,
                dnnl::memory& scratch) {
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, scratch}};
#if ST_ONEDNN_API == 3
  if (p.alpha != 1.f)
    args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS,
                 dnnl::memory({{1}, dt::f32, dnnl::memory::format_tag::x}, cpu_engine(),
                              const_cast<float*>(&p.alpha)));
#endif
  p.mm.execute(s, args);
}

std::mutex g_mu;
std::map<Key, std::shared_ptr<const Prim>> g_cache;

std::shared_ptr<const Prim> make(const Key& key) {
  const auto [ta, tb, M, N, K, lda, ldb, ldc, c_bf16, alpha, beta] = key;
  auto p = std::make_shared<Prim>();
  // op(A) [M, K] and op(B) [K, N] as strided views of the stored operands.
  p->a = dnnl::memory::desc({M, K}, dt::bf16,
                            ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  p->b = dnnl::memory::desc({K, N}, dt::bf16,
                            tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  p->c = dnnl::memory::desc({M, N}, c_bf16 ? dt::bf16 : dt::f32, dnnl::memory::dims{ldc, 1});
  p->alpha = alpha;
  const dnnl::matmul::primitive_desc pd = make_matmul(*p, beta);
  p->scratch = pd.scratchpad_desc();
  p->impl = pd.impl_info_str();
  p->mm = dnnl::matmul(pd);
  return p;
}

std::shared_ptr<const Prim> lookup(const Key& key) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_cache.find(key);
    if (it != g_cache.end()) return it->second;
  }
  std::shared_ptr<const Prim> p;
  try {
    p = make(key);
  } catch (const dnnl::error& e) {
    ST_CHECK(false, "oneDNN could not build a bf16 matmul ", std::get<2>(key), "x",
             std::get<3>(key), "x", std::get<4>(key), ": ", e.what());
  }
  std::lock_guard<std::mutex> lock(g_mu);
  return g_cache.emplace(key, p).first->second;  // a racing builder's copy wins: equal
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    default:
      return "other";
  }
}

// Decided once: oneDNN's instruction set for this CPU (after DNNL_MAX_CPU_ISA)
// and whether it holds the AVX512-BF16 instructions (AMX includes them).
struct Choice {
  bool native = false;
  std::string what;
};
const Choice& choice() {
  static const Choice c = [] {
    Choice r;
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const unsigned need = unsigned(dnnl::cpu_isa::avx512_core_bf16);
    r.native = (unsigned(isa) & need) == need;
    const dnnl::version_t* v = dnnl::version();
    r.what = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
             std::to_string(v->patch) + ", isa " + isa_name(isa);
    if (r.native) {
      const int64_t n = 768;
      r.what += ", " + lookup(Key{false, false, n, n, n, n, n, n, false, 1.f, 0.f})->impl;
    } else {
      r.what += " (no bf16 instructions): bf16 GEMM widened to fp32";
    }
    return r;
  }();
  return c;
}
}  // namespace

bool gemm_bf16_native() { return choice().native; }

std::string gemm_bf16_library() {
  return choice().native ? choice().what + " (bf16 x bf16, fp32 accumulate)" : choice().what;
}

void gemm_bf16_onednn(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                      void* C, int64_t ldc, bool c_bf16) {
  ST_CHECK(gemm_bf16_native(), "gemm_bf16_onednn: ", choice().what);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // no product: C = beta * C, as BLAS does
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        if (c_bf16) {
          uint16_t& h = static_cast<uint16_t*>(C)[i * ldc + j];
          h = beta == 0.f ? 0 : f32_to_bf16(beta * bf16_to_f32(h));
        } else {
          float& f = static_cast<float*>(C)[i * ldc + j];
          f = beta == 0.f ? 0.f : beta * f;
        }
      }
    return;
  }
  const auto p = lookup(Key{ta, tb, M, N, K, lda, ldb, ldc, c_bf16, alpha, beta});
  thread_local std::vector<uint8_t> scratch;
  thread_local std::unique_ptr<dnnl::stream> stream;
  if (!stream) stream = std::make_unique<dnnl::stream>(cpu_engine());
  // 64-byte aligned, as oneDNN's own scratchpads are.
  if (scratch.size() < p->scratch.get_size() + 64) scratch.resize(p->scratch.get_size() + 64);
  void* sp = scratch.data();
  size_t room = scratch.size();
  sp = std::align(64, p->scratch.get_size(), sp, room);
  dnnl::engine& e = cpu_engine();
  dnnl::memory ma(p->a, e, const_cast<uint16_t*>(A)), mb(p->b, e, const_cast<uint16_t*>(B)),
      mc(p->c, e, C), ms(p->scratch, e, sp);
  run_matmul(*p, *stream, ma, mb, mc, ms);
  stream->wait();
}
}  // namespace st::kernels

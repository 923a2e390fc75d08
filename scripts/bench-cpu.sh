#!/usr/bin/env bash
# CPU benchmark of a training step (not a test): scaletrain's default model on
# this machine at 1 rank and at 2 data-parallel ranks (1 thread each), beside,
# measured in the same run, the machine's single-precision GEMM rate (sgemm,
# as scaletrain measures it at start, and torch.mm) and PyTorch's training
# step (python3-torch, same model, batch and AdamW) at 1 thread.
# Usage: scripts/bench-cpu.sh [BUILD_DIR] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
steps=${2:-8}
mb=2
cd "$here"
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d /tmp/scaletrain-bench.XXXXXX)
common=(--config configs/models/default.yaml --set data.source=synthetic --set train.steps="$steps"
        --set train.micro_batch=$mb --set runtime.threads=1 --set checkpoint.interval=0
        --set train.warmup_steps_excluded=2)
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<library default>}"
"$build/app/scaletrain" "${common[@]}" --out "$out/np1" > "$out/np1.log"
mpirun --oversubscribe --bind-to none -np 2 "$build/app/scaletrain" "${common[@]}" --out "$out/np2" > "$out/np2.log"
read -r L D H KV F V T < <(/usr/bin/python3 -c "
import json; m=json.load(open('$out/np1/run.json'))['model']
print(m['n_layers'], m['d_model'], m['n_heads'], m['n_kv_heads'], m['ffn_hidden'], m['vocab_size'], m['seq_len'])")
# One thread for PyTorch too: OpenBLAS's own pool ignores torch.set_num_threads.
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/scripts/bench_torch_step.py" --layers "$L" --d "$D" --heads "$H" --kv "$KV" \
  --ffn "$F" --vocab "$V" --seq "$T" --batch $mb --steps "$steps" --threads 1 > "$out/torch.json"
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def run(name):
    r = json.load(open(f"{out}/{name}/run.json"))
    steps = [json.loads(l) for l in open(f"{out}/{name}/telemetry/rank_00000.jsonl")]
    steps = [s for s in steps if s.get("type") == "step"][2:]
    return r, statistics.median(s["step_s"] for s in steps)
r1, s1 = run("np1"); r2, s2 = run("np2")
t = json.load(open(f"{out}/torch.json"))
m = r1["model"]; N, L, d, T = m["n_params"], m["n_layers"], m["d_model"], m["seq_len"]
B = r1["config"]["train"]["micro_batch"]
flops_seq = 3 * (2 * N * T + 4 * L * d * T * T)   # MPT/llm-foundry model FLOPs
def row(name, step_s, seqs_per_rank, peak):
    gf = flops_seq * seqs_per_rank / step_s / 1e9
    return f"| {name} | {step_s*1e3:8.1f} | {seqs_per_rank*T/step_s:8.0f} | {gf:6.1f} | {100*gf*1e9/peak:5.1f}% |"
peak1 = r1["device"]["peak_flops"]; peak2 = r2["device"]["peak_flops"]
print(f"\nmodel: {N/1e6:.2f}M params, {L} layers, d={d}, seq {T}, micro-batch {B} per rank, fp32, 1 thread per rank")
print(f"sgemm rate (scaletrain, 768^3): 1 rank {peak1/1e9:.1f} GFLOP/s; 2 ranks at once {peak2/1e9:.1f} GFLOP/s each; torch.mm {t['torch_sgemm_flops']/1e9:.1f} GFLOP/s")
print("\n| engine | step ms | tok/s per rank | GFLOP/s per rank | of sgemm |\n|---|---|---|---|---|")
print(row("scaletrain, 1 rank", s1, B, peak1))
print(row("scaletrain, 2 ranks (dp2), per rank", s2, B, peak2))
print(row(f"PyTorch {t['torch']} (same model, AdamW)", t["step_s"], B, peak1))
print(f"\nscaletrain / PyTorch step-time ratio (1 rank): {s1 / t['step_s']:.2f} (below 1: scaletrain faster)")
print(f"dp2 per-rank throughput vs 1 rank: {s1 / s2:.2f}")
PY
echo "raw output: $out"

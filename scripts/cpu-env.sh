# Sourced by the run scripts: picks OpenBLAS's GEMM kernel for this CPU when
# OpenBLAS does not recognise it. OpenBLAS 0.3.21 (Debian 12) falls back to
# its generic "Prescott" kernel on CPUs it cannot name (e.g. many cloud VMs
# that report "Intel(R) Xeon(R) Processor"); compare the log's "sgemm
# measured" line with and without it, the speed-up varies by machine. Set
# OPENBLAS_CORETYPE yourself to override; SCALETRAIN_OPENBLAS_AUTO=0 disables.
if [[ -z "${OPENBLAS_CORETYPE:-}" && "${SCALETRAIN_OPENBLAS_AUTO:-1}" == 1 && -r /proc/cpuinfo ]]; then
  if grep -qw avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
  fi
fi

# oneDNN for the CPU backend's bf16 GEMM (kernels/cpu/gemm_onednn.cpp):
# SCALETRAIN_ONEDNN=AUTO uses it when found, ON requires it, OFF leaves it
# out (bf16 GEMMs then widen their operands to fp32 for OpenBLAS).
# Supported: oneDNN 2.6-2.7 (Debian 12's libdnnl-dev 2.6.3) and 3.x (one code
# path per API in gemm_onednn.cpp); a 4.x is refused here rather than failing
# in the compiler. SCALETRAIN_ONEDNN3_INCLUDE (or the same environment
# variable when the test runs) names a oneDNN 3.x include folder that the
# onednn3_syntax test compiles gemm_onednn.cpp against (scripts/onednn-headers.sh
# makes one from a oneDNN checkout); without it the test uses the oneDNN 3.7.1
# headers committed in ctest/model/onednn-3.7.1 (on no target's include path).
set(SCALETRAIN_ONEDNN3_INCLUDE "$ENV{SCALETRAIN_ONEDNN3_INCLUDE}" CACHE PATH
  "oneDNN 3.x include folder for the onednn3_syntax test (empty: ctest/model/onednn-3.7.1)")
set(SCALETRAIN_HAVE_ONEDNN 0)
set(SCALETRAIN_ONEDNN_SUMMARY "off (SCALETRAIN_ONEDNN=OFF): bf16 GEMM widened to fp32 sgemm")
if(NOT SCALETRAIN_ONEDNN STREQUAL "OFF")
  list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_LIST_DIR})
  find_package(OneDNN 2.6...<4)
  if(OneDNN_FOUND)
    set(SCALETRAIN_HAVE_ONEDNN 1)
    set(SCALETRAIN_ONEDNN_SUMMARY "oneDNN ${OneDNN_VERSION} (${OneDNN_LIBRARY})")
  elseif(SCALETRAIN_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "SCALETRAIN_ONEDNN=ON but no oneDNN 2.6-2.7 or 3.x was found "
      "(Debian: libdnnl-dev; scripts/install-deps.sh installs it)")
  else()
    set(SCALETRAIN_ONEDNN_SUMMARY "off (not found: libdnnl-dev): bf16 GEMM widened to fp32 sgemm")
  endif()
endif()

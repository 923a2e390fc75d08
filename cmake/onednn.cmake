# oneDNN for the CPU backend's bf16 GEMM (kernels/cpu/gemm_onednn.cpp):
# SCALETRAIN_ONEDNN=AUTO uses it when found, ON requires it, OFF leaves it
# out (bf16 GEMMs then widen their operands to fp32 for OpenBLAS).
set(SCALETRAIN_HAVE_ONEDNN 0)
set(SCALETRAIN_ONEDNN_SUMMARY "off (SCALETRAIN_ONEDNN=OFF): bf16 GEMM widened to fp32 sgemm")
if(NOT SCALETRAIN_ONEDNN STREQUAL "OFF")
  list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_LIST_DIR})
  find_package(OneDNN 2.6)
  if(OneDNN_FOUND)
    set(SCALETRAIN_HAVE_ONEDNN 1)
    set(SCALETRAIN_ONEDNN_SUMMARY "oneDNN ${OneDNN_VERSION} (${OneDNN_LIBRARY})")
  elseif(SCALETRAIN_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "SCALETRAIN_ONEDNN=ON but oneDNN >= 2.6 was not found "
      "(Debian: libdnnl-dev; scripts/install-deps.sh installs it)")
  else()
    set(SCALETRAIN_ONEDNN_SUMMARY "off (not found: libdnnl-dev): bf16 GEMM widened to fp32 sgemm")
  endif()
endif()

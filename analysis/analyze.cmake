# scaletrain-analyze: run / campaign / mpt reports. Links the telemetry reader
# and metrics only (no MPI, no CUDA). The logic is a library so the tests call
# it directly; the benchmark lives in analysis/bench.
add_library(st_analysis
  ${CMAKE_CURRENT_LIST_DIR}/analyze/run_summary.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/stragglers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/campaign.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/prediction.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/plots.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/mpt.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/synth.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/ckpt_cost.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/trace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/trace_cli.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/hang.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/export_cli.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analyze/cli.cpp)
target_include_directories(st_analysis PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(st_analysis PUBLIC st_telemetry st_tensorboard st_metrics st_cli st_core
  Threads::Threads)

add_executable(scaletrain-analyze ${CMAKE_CURRENT_LIST_DIR}/analyze/main.cpp)
target_link_libraries(scaletrain-analyze PRIVATE st_analysis)

add_executable(scaletrain-analyze-bench ${CMAKE_CURRENT_LIST_DIR}/bench/bench_analyze.cpp)
target_link_libraries(scaletrain-analyze-bench PRIVATE st_analysis)

# scaletrain-plan: layout planning, calibration, predicted-vs-measured
# comparison and the MPT fit (docs/planner.md). Links lib/plan, the CPU
# kernels (for calibrate's timings), the telemetry reader and the analysis
# library (run summaries, plots): no MPI, no CUDA.
add_library(st_planner_ops ${CMAKE_CURRENT_LIST_DIR}/planner/op_runner.cpp)
target_include_directories(st_planner_ops PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(st_planner_ops PUBLIC st_plan st_kernels_cpu st_tensor st_core)

add_library(st_planner
  ${CMAKE_CURRENT_LIST_DIR}/planner/cli.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/calibrate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/compare.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/summary.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/mpt_fit.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/csv.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/published.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner/gpu_rates.cpp)
target_link_libraries(st_planner PUBLIC st_planner_ops st_analysis st_plan st_telemetry
  st_record_step OpenMP::OpenMP_CXX)

add_executable(scaletrain-plan ${CMAKE_CURRENT_LIST_DIR}/planner/main.cpp)
target_link_libraries(scaletrain-plan PRIVATE st_planner)

# The MPI half of `scaletrain-plan calibrate`, launched by it under mpiexec:
# the one program under analysis/ that links MPI (analysis/probe/probe.cpp).
add_executable(scaletrain-plan-probe ${CMAKE_CURRENT_LIST_DIR}/probe/probe.cpp)
target_link_libraries(scaletrain-plan-probe PRIVATE st_planner_ops st_comm st_runtime)
add_dependencies(scaletrain-plan scaletrain-plan-probe)

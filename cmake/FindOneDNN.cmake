# Find module for oneDNN (Debian's libdnnl-dev): the header and the library,
# without the package's own dnnl-config.cmake, which also requires the OpenCL
# headers for its GPU runtime (the CPU backend never uses it). Defines the
# imported target OneDNN::dnnl and OneDNN_VERSION from dnnl_version.h.
find_path(OneDNN_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(OneDNN_LIBRARY NAMES dnnl)
if(OneDNN_INCLUDE_DIR AND EXISTS ${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h)
  file(STRINGS ${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h _st_dnnl_v
    REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
    OneDNN_VERSION "${_st_dnnl_v}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN REQUIRED_VARS OneDNN_LIBRARY OneDNN_INCLUDE_DIR
  VERSION_VAR OneDNN_VERSION HANDLE_VERSION_RANGE)
if(OneDNN_FOUND AND NOT TARGET OneDNN::dnnl)
  add_library(OneDNN::dnnl UNKNOWN IMPORTED)
  set_target_properties(OneDNN::dnnl PROPERTIES IMPORTED_LOCATION ${OneDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${OneDNN_INCLUDE_DIR})
endif()

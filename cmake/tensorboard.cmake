# TensorBoard event files (lib/tensorboard): the Event and Summary messages
# need protobuf (Debian: libprotobuf-dev, protobuf-compiler).
# SCALETRAIN_TENSORBOARD=AUTO uses it when found, ON requires it, OFF leaves
# it out (runtime.tensorboard then writes nothing and says so; the export
# refuses with "built without").
set(SCALETRAIN_HAVE_TENSORBOARD 0)
set(SCALETRAIN_TENSORBOARD_SUMMARY "off (SCALETRAIN_TENSORBOARD=OFF)")
if(NOT SCALETRAIN_TENSORBOARD STREQUAL "OFF")
  find_package(Protobuf 3)
  if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
    set(SCALETRAIN_HAVE_TENSORBOARD 1)
    set(SCALETRAIN_TENSORBOARD_SUMMARY "protobuf ${Protobuf_VERSION} (${Protobuf_PROTOC_EXECUTABLE})")
  elseif(SCALETRAIN_TENSORBOARD STREQUAL "ON")
    message(FATAL_ERROR "SCALETRAIN_TENSORBOARD=ON but protobuf was not found "
      "(Debian: libprotobuf-dev protobuf-compiler; scripts/install-deps.sh installs them)")
  else()
    set(SCALETRAIN_TENSORBOARD_SUMMARY
      "off (not found: libprotobuf-dev, protobuf-compiler): no TensorBoard event files")
  endif()
endif()

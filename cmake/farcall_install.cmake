# `cmake --install build [--prefix DIR]`: the binaries, the C++ client
# library and the handler SDK, with a CMake package, so that another project
# can write
#
#   find_package(farcall CONFIG REQUIRED)
#   target_link_libraries(my_client PRIVATE farcall::client)
#   target_link_libraries(my_plugin PRIVATE farcall::handler_sdk)
#
# farcall::client is static: it brings its own internal libraries along
# (farcall::core, farcall::core_wire and the generated protobuf code), and
# the package finds gRPC, Protobuf and Abseil for it. farcall::handler_sdk is
# headers only (C ABI, farcall/handler.h). tests/install/ builds a client and
# a plugin this way, out of the tree, and runs them (ctest install_test).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FARCALL_EXPORTED farcall_client farcall_core farcall_core_wire farcall_proto_pb
    farcall_proto_grpc health_proto_pb health_proto_grpc)
# With UCX, the client's UCX data plane comes along, and the package finds
# UCX through pkg-config as the build did.
set(FARCALL_UCX_DEPENDENCY "")
if(FARCALL_WITH_UCX)
  list(APPEND FARCALL_EXPORTED farcall_core_ucx)
  set(FARCALL_UCX_DEPENDENCY
      "find_dependency(PkgConfig)\npkg_check_modules(UCX REQUIRED QUIET IMPORTED_TARGET ucx)")
endif()
foreach(t ${FARCALL_EXPORTED})
  string(REGEX REPLACE "^farcall_" "" name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${name})
endforeach()
set_target_properties(farcall_handler_sdk PROPERTIES EXPORT_NAME handler_sdk)
add_library(farcall::client ALIAS farcall_client)
add_library(farcall::handler_sdk ALIAS farcall_handler_sdk)

install(TARGETS ${FARCALL_EXPORTED} farcall_handler_sdk EXPORT farcallTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS farcall-agent farcall-router farcall
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT bin)
install(FILES client/include/farcall/client.h client/include/farcall/call_types.h
              core/include/farcall/tensor_spec.h
              device_agents/sdk/include/farcall/handler.h
              device_agents/sdk/include/farcall/handler_api.h
              device_agents/sdk/include/farcall/handler_binding.h
              device_agents/sdk/include/farcall/handler_dtypes.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/farcall COMPONENT dev)

set(FARCALL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/farcall)
install(EXPORT farcallTargets NAMESPACE farcall:: DESTINATION ${FARCALL_CMAKE_DIR}
        COMPONENT dev)
configure_package_config_file(cmake/farcallConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/farcallConfig.cmake INSTALL_DESTINATION ${FARCALL_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/farcallConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/farcallConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/farcallConfigVersion.cmake
        DESTINATION ${FARCALL_CMAKE_DIR} COMPONENT dev)

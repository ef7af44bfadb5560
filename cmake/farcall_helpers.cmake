# Small helpers so that each folder declares its targets in a few lines.

set(FARCALL_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

# farcall_cc_library(NAME name [HDRS ...] SRCS ... [DEPS ...])
function(farcall_cc_library)
  cmake_parse_arguments(A "" "NAME" "HDRS;SRCS;DEPS" ${ARGN})
  add_library(${A_NAME} STATIC ${A_SRCS} ${A_HDRS})
  # The source tree, while building; an installed library has its public
  # headers under include/ instead.
  target_include_directories(${A_NAME} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  # Warnings for C++ sources only: nvcc takes host flags another way.
  target_compile_options(${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FARCALL_WARNINGS}>)
  target_link_libraries(${A_NAME} PUBLIC ${A_DEPS})
endfunction()

# farcall_cc_binary(NAME name SRCS ... [DEPS ...])
function(farcall_cc_binary)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_include_directories(${A_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${A_NAME} PRIVATE ${FARCALL_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
endfunction()

# farcall_cc_test(NAME name SRCS ... [DEPS ...] [LABELS ...])
function(farcall_cc_test)
  if(NOT FARCALL_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_include_directories(${A_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${A_NAME} PRIVATE ${FARCALL_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME})
  if(A_LABELS)
    set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}")
  endif()
endfunction()

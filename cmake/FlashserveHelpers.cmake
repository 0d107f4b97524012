# Target helpers: every module declares its targets through these, so warnings, include paths,
# static linking and test labels are decided in one place.
include_guard(GLOBAL)

# Aggregate targets: `gpu_tests` (what `make static` builds for the GPU machine), `benches`,
# `fuzzers`. Tests and benches add themselves to these.
add_custom_target(gpu_tests)
add_custom_target(benches)
add_custom_target(fuzzers)

# Warnings are errors in our own code only (imported targets are SYSTEM includes).
set(FS_CXX_WARNINGS -Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter
    -Wno-missing-field-initializers)

# fs_cc_library(NAME n [SRCS ...] [HDRS ...] [DEPS ...] [PRIVATE_DEPS ...])
# A library with no SRCS is an INTERFACE (header-only) target.
function(fs_cc_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;HDRS;DEPS;PRIVATE_DEPS;DEFINES" ${ARGN})
  if(A_SRCS)
    add_library(${A_NAME} STATIC ${A_SRCS} ${A_HDRS})
    target_include_directories(${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_compile_options(${A_NAME} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:${FS_CXX_WARNINGS}>)
    target_link_libraries(${A_NAME} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
    target_compile_definitions(${A_NAME} PUBLIC ${A_DEFINES})
  else()
    add_library(${A_NAME} INTERFACE ${A_HDRS})
    target_include_directories(${A_NAME} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_link_libraries(${A_NAME} INTERFACE ${A_DEPS})
    target_compile_definitions(${A_NAME} INTERFACE ${A_DEFINES})
  endif()
endfunction()

# Applies the static-link flags to an executable when FLASHSERVE_STATIC is on: libstdc++ and
# libgcc are linked in so the binary runs on the GPU machine's newer Ubuntu.
function(fs_static_link target)
  if(FLASHSERVE_STATIC)
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
endfunction()

# fs_cc_binary(NAME n SRCS ... DEPS ... [OUTPUT_NAME name])
function(fs_cc_binary)
  cmake_parse_arguments(A "" "NAME;OUTPUT_NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FS_CXX_WARNINGS}>)
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  if(A_OUTPUT_NAME)
    set_target_properties(${A_NAME} PROPERTIES OUTPUT_NAME ${A_OUTPUT_NAME})
  endif()
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  fs_static_link(${A_NAME})
endfunction()

# fs_cc_test(NAME n SRCS ... DEPS ... [LABELS ...] [TIMEOUT s] [ENV k=v ...])
# Tests run from the source root so that paths like tests/conformance/data/... resolve.
# LABELS gpu marks tests that need a device; they skip (GTEST_SKIP) when none is present.
function(fs_cc_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ENV" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FS_CXX_WARNINGS}>)
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gmock GTest::gtest_main)
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  fs_static_link(${A_NAME})
  add_test(NAME ${A_NAME} COMMAND ${A_NAME} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES TIMEOUT ${A_TIMEOUT}
    ENVIRONMENT "FS_SOURCE_DIR=${PROJECT_SOURCE_DIR};FS_BINARY_DIR=${PROJECT_BINARY_DIR};${A_ENV}")
  if(A_LABELS)
    set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}")
    # A gtest binary that skips every test exits 0; ctest reports it as skipped through this
    # regex so a machine without a GPU shows "skipped", not "passed".
    if("gpu" IN_LIST A_LABELS)
      add_dependencies(gpu_tests ${A_NAME})
      set_tests_properties(${A_NAME} PROPERTIES SKIP_REGULAR_EXPRESSION "no CUDA device")
    endif()
  endif()
endfunction()

# fs_ptxas_test(NAME n CASES file): a test (no device, needs nvcc) that compiles the translation
# units listed in `file` (relative to the calling directory) with `-Xptxas -v` and fails on a
# ptxas performance note or a spill the file forbids (kernels/ptxas_check.sh). FLASHSERVE_CUDA
# only.
function(fs_ptxas_test)
  cmake_parse_arguments(A "" "NAME;CASES" "" ${ARGN})
  add_test(NAME ${A_NAME}
    COMMAND ${PROJECT_SOURCE_DIR}/kernels/ptxas_check.sh ${CMAKE_CUDA_COMPILER}
            ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/${A_CASES})
  set_tests_properties(${A_NAME} PROPERTIES TIMEOUT 900 LABELS ptxas)
endfunction()

# fs_cuda_library(NAME n SRCS ... [HDRS ...] DEPS ...): CUDA sources for sm_90a. Only declared
# when FLASHSERVE_CUDA is on; callers guard with if(FLASHSERVE_CUDA).
function(fs_cuda_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  add_library(${A_NAME} STATIC ${A_SRCS} ${A_HDRS})
  target_include_directories(${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${A_NAME} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${FS_CXX_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Werror=all-warnings -lineinfo>)
  set_target_properties(${A_NAME} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
    POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(${A_NAME} PUBLIC ${A_DEPS} CUDA::cudart_static)
endfunction()

# fs_cc_bench(NAME n SRCS ... DEPS ... [GPU]): a Google Benchmark or plain main() binary in
# build/bench/, part of the `benches` target (and of `gpu_tests` when GPU is given, so that the
# static GPU build carries it).
function(fs_cc_bench)
  cmake_parse_arguments(A "GPU" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FS_CXX_WARNINGS}>)
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
  fs_static_link(${A_NAME})
  add_dependencies(benches ${A_NAME})
  if(A_GPU)
    add_dependencies(gpu_tests ${A_NAME})
  endif()
endfunction()

# Warning flags, sanitizers and precompiled headers applied to every charm target through
# charm_setup_target().
include(CharmPch)
add_library(charm_warnings INTERFACE)
target_compile_options(charm_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${CHARM_WERROR}>>:-Werror>
  # CUDA sources: nvcc's own warnings, and the host compiler's on the host side of the .cu files.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${CHARM_WERROR}>>:-Werror=all-warnings -Xcompiler=-Werror>)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 at -O3 reports false positives inside libstdc++ and Boost.Graph headers
  # (std::string copies, Boost's optional iterators); keep them visible, not fatal.
  target_compile_options(charm_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=restrict -Wno-error=maybe-uninitialized -Wno-error=array-bounds -Wno-error=stringop-overflow -Wno-error=stringop-overread>)
endif()
if(CHARM_SANITIZE)
  target_compile_options(charm_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${CHARM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(charm_warnings INTERFACE -fsanitize=${CHARM_SANITIZE})
endif()
add_library(charm::warnings ALIAS charm_warnings)

# charm_setup_target(<target> [NO_PCH]): warnings, sanitizers, the repository's include root and,
# unless NO_PCH (a one-file program gains nothing from its own), the precompiled headers.
function(charm_setup_target target)
  cmake_parse_arguments(S "NO_PCH" "" "PCH_EXTRA" ${ARGN})
  target_link_libraries(${target} PRIVATE charm::warnings)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  if(NOT S_NO_PCH)
    charm_precompile_headers(${target} EXTRA ${S_PCH_EXTRA})
  endif()
endfunction()

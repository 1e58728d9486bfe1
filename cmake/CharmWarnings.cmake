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
  if(CHARM_SANITIZE MATCHES "address")
    # ASan's executables linked at a fixed address: a position-independent one makes the loader apply
    # about 680,000 relative relocations at every start (the globals' and the coverage tables' addresses),
    # a fifth of each start of the instrumented `charm`, which the CLI tests start hundreds of times.
    target_link_options(charm_warnings INTERFACE $<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>)
  endif()
endif()
add_library(charm::warnings ALIAS charm_warnings)

# charm_compile_together(<target> <group> <source>...): the parts of one file split along its seams for the
# reader (topology_json.cpp and topology_*.cpp, calibration*.cpp, ...) compile as one translation unit, CMake's
# unity build in GROUP mode, so the headers they share are parsed once, as before the split. Compiled apart,
# the 30 parts took each of CI's three builds longer (a fresh clone's run: 2172 s, against 1726-1804 s for the
# tree before the split, on 2026-12-05 and 12-06). Each part still compiles alone: -DCHARM_UNITY=OFF. The Python
# module's parts stay apart (an anonymous helper there shares a public function's name).
option(CHARM_UNITY "compile the parts of a split file as one translation unit" ON)
function(charm_compile_together target group)
  if(CHARM_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES UNITY_GROUP ${group})
  endif()
endfunction()

# charm_library_flags(<target>): what every library compiles with beyond the warnings, so that all of
# them can share one precompiled header: position-independent code (the Python module links them into a
# shared object) without semantic interposition (so the command line's code keeps its inlining).
function(charm_library_flags target)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
  endif()
endfunction()

# charm_setup_target(<target> [NO_PCH] [OWN_PCH] [PCH_EXTRA header...]): warnings, sanitizers, the
# repository's include root and the precompiled headers. A library shares the libraries' one
# (charm_share_library_pch) unless it compiles with other flags (OWN_PCH) or more headers (PCH_EXTRA);
# a program has its own; NO_PCH: none (a one-file program gains nothing from its own).
function(charm_setup_target target)
  cmake_parse_arguments(S "NO_PCH;OWN_PCH" "" "PCH_EXTRA" ${ARGN})
  target_link_libraries(${target} PRIVATE charm::warnings)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    charm_library_flags(${target})
  endif()
  if(S_NO_PCH)
    return()
  endif()
  if(type STREQUAL "STATIC_LIBRARY" AND NOT S_OWN_PCH AND NOT S_PCH_EXTRA)
    charm_share_library_pch(${target})
  else()
    charm_precompile_headers(${target} EXTRA ${S_PCH_EXTRA})
  endif()
endfunction()

# Precompiled headers. Nearly every file parses the same standard, fmt and nlohmann/json headers
# (about 2.5 s of a 2-core machine's time a file, at any optimisation level). The libraries share one
# precompiled header (charm_library_pch: they compile with the same flags, charm_library_flags), the test
# programs another (charm_test_pch, tests/CMakeLists.txt); a target compiled otherwise has its own. Each
# header took 15-21 s of CPU to build on the 2-core machine, and there were 13 of the libraries' in each of
# CI's three builds (2026-12-06). CHARM_PCH=OFF builds without them (a check that every
# file includes what it uses).
option(CHARM_PCH "Precompile the standard, fmt and nlohmann/json headers" ON)

# Spelled for a generator expression: <name$<ANGLE-R>, so that the C++ headers reach C++ sources
# only (the CUDA sources of a target are left as they are).
set(CHARM_PCH_HEADERS algorithm cmath cstdint functional map memory optional string string_view unordered_map
    utility variant vector fmt/format.h nlohmann/json.hpp)

# charm_precompile_headers(<target> [EXTRA header ...]): the common headers (and EXTRA ones)
# precompiled for <target>'s C++ sources.
function(charm_precompile_headers target)
  if(NOT CHARM_PCH)
    return()
  endif()
  cmake_parse_arguments(P "" "" "EXTRA" ${ARGN})
  set(headers)
  foreach(h ${CHARM_PCH_HEADERS} ${P_EXTRA})
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:<${h}$<ANGLE-R>>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

# charm_share_library_pch(<target>): <target> (a library, with charm_library_flags) compiles with the
# libraries' precompiled header, built once in charm_library_pch.
function(charm_share_library_pch target)
  if(NOT CHARM_PCH)
    return()
  endif()
  if(NOT TARGET charm_library_pch)
    set(source ${PROJECT_BINARY_DIR}/library_pch.cpp)
    file(WRITE ${source} "// The libraries' precompiled header is built from this file.\n")
    add_library(charm_library_pch OBJECT ${source})
    # What every library links (charm::support's): fmt's definitions reach the header.
    target_link_libraries(charm_library_pch PRIVATE charm::warnings fmt::fmt nlohmann_json::nlohmann_json)
    charm_library_flags(charm_library_pch)
    charm_precompile_headers(charm_library_pch)
  endif()
  target_precompile_headers(${target} REUSE_FROM charm_library_pch)
endfunction()

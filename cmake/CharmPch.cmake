# Precompiled headers. Nearly every file parses the same standard, fmt and nlohmann/json headers
# (about 2.5 s of a 2-core machine's time a file, at any optimisation level); each library target
# parses them once into its own precompiled header, and the test programs share one
# (charm_test_pch, tests/CMakeLists.txt). CHARM_PCH=OFF builds without them (a check that every
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

# Warning flags and sanitizers applied to every charm target through charm_setup_target().
add_library(charm_warnings INTERFACE)
target_compile_options(charm_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${CHARM_WERROR}>>:-Werror>)
if(CHARM_SANITIZE)
  target_compile_options(charm_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${CHARM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(charm_warnings INTERFACE -fsanitize=${CHARM_SANITIZE})
endif()
add_library(charm::warnings ALIAS charm_warnings)

function(charm_setup_target target)
  target_link_libraries(${target} PRIVATE charm::warnings)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
endfunction()

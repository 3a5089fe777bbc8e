# The layers, lowest first (../shared DESIGN.md): a file of one layer may include headers of
# its own layer and of lower ones only. replicator_check_layers(ROOT) fails the configure
# with the offending file, line and include when one reaches up; run as a script
# (`cmake -DROOT=dir -P cmake/check_layers.cmake`) it exits non-zero instead.
#
# Gloo's headers are included by src/engines/gloo/gloo.h alone, which renames their namespace
# to that of the engine's private libgloo (cmake/gloo.cmake): a file that included one itself
# would reference the gloo inside LibTorch. The check names such a file too.
#
# A file's layer: src/<layer>/...; apps/, bench/, examples/ and tests/ are the top. Public
# headers include/replicator/<h>: the layer that implements them (below).
set(REPLICATOR_LAYERS
  base rendezvous comm engines collectives runtime launch torch data rl train python apps)

function(_replicator_public_layer header out)
  if(header MATCHES "^replicator/(dtype|errors|config|options)\\.h$")
    set(layer base)
  elseif(header MATCHES "^replicator/rendezvous/")
    set(layer rendezvous)
  elseif(header MATCHES "^replicator/(replicator|replica_context|per_replica)\\.h$")
    set(layer runtime)
  elseif(header MATCHES "^replicator/launch/")
    set(layer launch)
  elseif(header MATCHES "^replicator/(torch\\.h|torch/)")
    set(layer torch)
  elseif(header MATCHES "^replicator/data/")
    set(layer data)
  elseif(header MATCHES "^replicator/rl/")
    set(layer rl)
  elseif(header MATCHES "^replicator/train/")
    set(layer train)
  else()
    set(layer "")
  endif()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

function(_replicator_file_layer rel out)
  set(layer "")
  if(rel MATCHES "^src/([a-z_]+)/")
    set(layer "${CMAKE_MATCH_1}")
  elseif(rel MATCHES "^include/(replicator/.*)$")
    _replicator_public_layer("${CMAKE_MATCH_1}" layer)
  elseif(rel MATCHES "^(apps|bench|examples|tests)/")
    set(layer apps)
  endif()
  list(FIND REPLICATOR_LAYERS "${layer}" index)
  set(${out} ${index} PARENT_SCOPE)
endfunction()

function(replicator_check_layers root)
  file(GLOB_RECURSE files RELATIVE "${root}"
    "${root}/src/*.h" "${root}/src/*.cc" "${root}/include/*.h" "${root}/apps/*.h"
    "${root}/apps/*.cc" "${root}/bench/*.h" "${root}/bench/*.cc" "${root}/tests/*.h"
    "${root}/tests/*.cc")
  set(errors "")
  foreach(rel IN LISTS files)
    _replicator_file_layer("${rel}" mine)
    if(mine LESS 0)
      continue()
    endif()
    list(GET REPLICATOR_LAYERS ${mine} mine_name)
    if(NOT rel STREQUAL "src/engines/gloo/gloo.h")
      file(STRINGS "${root}/${rel}" gloo_lines REGEX "^#include <gloo/")
      foreach(line IN LISTS gloo_lines)
        string(APPEND errors "  ${rel} includes ${line}: include src/engines/gloo/gloo.h instead\n")
      endforeach()
    endif()
    file(STRINGS "${root}/${rel}" lines REGEX "^#include \"")
    foreach(line IN LISTS lines)
      if(NOT line MATCHES "^#include \"([^\"]+)\"")
        continue()
      endif()
      set(target "${CMAKE_MATCH_1}")
      set(theirs -1)
      if(target MATCHES "^src/([a-z_]+)/")
        list(FIND REPLICATOR_LAYERS "${CMAKE_MATCH_1}" theirs)
      elseif(target MATCHES "^replicator/")
        _replicator_public_layer("${target}" name)
        list(FIND REPLICATOR_LAYERS "${name}" theirs)
      elseif(target MATCHES "^apps/")
        list(FIND REPLICATOR_LAYERS apps theirs)
      endif()
      if(theirs GREATER mine)
        list(GET REPLICATOR_LAYERS ${theirs} their_name)
        string(APPEND errors
          "  ${rel} (layer ${mine_name}) includes \"${target}\" (layer ${their_name})\n")
      endif()
    endforeach()
  endforeach()
  if(errors)
    message(FATAL_ERROR
      "replicator: a lower layer includes a higher one, or a file includes Gloo directly "
      "(layers, lowest first: ${REPLICATOR_LAYERS}):\n${errors}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED ROOT)
  replicator_check_layers("${ROOT}")
endif()

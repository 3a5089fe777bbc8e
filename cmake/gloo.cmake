# The gloo engine's own copy of Gloo: Debian's libgloo.so.0 with every symbol of namespace
# `gloo` renamed to `replicator_gloo`, under the soname libreplicator_gloo.so.0.
#
# Why: libtorch_cpu.so exports its own gloo (a newer snapshot; hundreds of symbols with
# exactly the names of Debian's, vtables and gloo::Context among them) and the wheel ships no
# gloo headers. With both in one process the dynamic linker binds each name once: our calls
# land in torch's copy, or torch's in Debian's, whichever library comes first. Under other
# names the two cannot meet. The engine includes gloo only through src/engines/gloo/gloo.h,
# which spells the namespace the same way, so every reference the compiler writes is to a
# renamed symbol. Debian ships neither a static libgloo nor (on this archive) its source, so
# the renaming is done on the shared library itself, by patchelf --rename-dynamic-symbols.
# tests/engines/gloo_bindings.sh checks, with LD_DEBUG=bindings in a process that also runs
# torch, that no gloo symbol crosses between the two copies.
#
# Defines the imported target replicator_libgloo (the renamed library, Debian's gloo headers,
# hiredis) and REPLICATOR_LIBGLOO_FILE; sets Gloo_FOUND to FALSE when Gloo or patchelf is
# missing.

function(replicator_private_gloo)
  find_package(Gloo CONFIG QUIET)
  if(NOT Gloo_FOUND)
    set(Gloo_FOUND FALSE PARENT_SCOPE)
    return()
  endif()
  find_program(REPLICATOR_PATCHELF patchelf HINTS "${REPLICATOR_VENV}/bin")
  find_library(REPLICATOR_HIREDIS hiredis)
  if(NOT REPLICATOR_PATCHELF OR NOT REPLICATOR_HIREDIS)
    message(STATUS "replicator: patchelf (scripts/requirements.txt) or hiredis not found, "
      "building without the gloo engine")
    set(Gloo_FOUND FALSE PARENT_SCOPE)
    return()
  endif()
  get_target_property(source gloo IMPORTED_LOCATION_RELWITHDEBINFO)
  if(NOT source)
    get_target_property(source gloo LOCATION)
  endif()
  get_target_property(includes gloo INTERFACE_INCLUDE_DIRECTORIES)
  set(out_dir "${PROJECT_BINARY_DIR}/gloo")
  set(out "${out_dir}/libreplicator_gloo.so.0")
  set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    "${source}")
  if(NOT EXISTS "${out}" OR "${source}" IS_NEWER_THAN "${out}")
    file(MAKE_DIRECTORY "${out_dir}")
    execute_process(COMMAND "${CMAKE_NM}" -D -P "${source}"
      OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "replicator: ${CMAKE_NM} could not list the symbols of ${source}")
    endif()
    string(REPLACE "\n" ";" symbols "${symbols}")
    set(map "")
    set(renamed 0)
    foreach(line IN LISTS symbols)
      string(REGEX MATCH "^[^ ]+" name "${line}")
      # `4gloo` is the mangled namespace (a source name is its length, then the name); a
      # digit before it would make it the tail of a longer name. Twice, for back-to-back
      # occurrences.
      string(REGEX REPLACE "([^0-9])4gloo" "\\115replicator_gloo" new "${name}")
      string(REGEX REPLACE "([^0-9])4gloo" "\\115replicator_gloo" new "${new}")
      if(NOT new STREQUAL name)
        string(APPEND map "${name} ${new}\n")
        math(EXPR renamed "${renamed} + 1")
      endif()
    endforeach()
    file(WRITE "${out_dir}/rename.map" "${map}")
    execute_process(COMMAND "${REPLICATOR_PATCHELF}"
      --rename-dynamic-symbols "${out_dir}/rename.map"
      --set-soname libreplicator_gloo.so.0 --output "${out}" "${source}"
      RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "replicator: patchelf could not rename the symbols of ${source}")
    endif()
    message(STATUS "replicator: ${out}: ${renamed} gloo symbols of ${source} renamed")
  endif()
  add_library(replicator_libgloo SHARED IMPORTED GLOBAL)
  set_target_properties(replicator_libgloo PROPERTIES
    IMPORTED_LOCATION "${out}" IMPORTED_SONAME libreplicator_gloo.so.0
    INTERFACE_INCLUDE_DIRECTORIES "${includes}"
    INTERFACE_LINK_LIBRARIES "${REPLICATOR_HIREDIS}")
  set(REPLICATOR_LIBGLOO_FILE "${out}" PARENT_SCOPE)
  set(Gloo_FOUND TRUE PARENT_SCOPE)
endfunction()

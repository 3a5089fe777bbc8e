# Multi-process tests of the gloo transport (label "multiproc").
# Included from tests/CMakeLists.txt when Gloo is found. One program plays every role; see
# the head of gloo_transport_test.cc.
add_executable(gloo_transport_test ${CMAKE_CURRENT_LIST_DIR}/gloo_transport_test.cc)
target_include_directories(gloo_transport_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(gloo_transport_test PRIVATE replicator::core GTest::gtest Threads::Threads)
target_compile_options(gloo_transport_test PRIVATE -Wall -Wextra)

# Rank 1 killed in the middle of an exchange: started by the test itself, not the launcher,
# which would stop rank 0 as soon as rank 1 dies.
# Processes of one host talk through shared memory; the "_tcp" cases turn it off.
add_test(NAME gloo_transport_peer_lost COMMAND gloo_transport_test --peer-lost)
add_test(NAME gloo_transport_peer_lost_tcp COMMAND gloo_transport_test --peer-lost)
set_tests_properties(gloo_transport_peer_lost_tcp PROPERTIES
  ENVIRONMENT "REPLICATOR_SHARED_MEMORY=off")
set(_gloo_tests gloo_transport_peer_lost gloo_transport_peer_lost_tcp)
if(TARGET replicator)
  foreach(np 2 3)
    add_test(NAME gloo_transport_np${np}
      COMMAND replicator launch -n ${np} -- $<TARGET_FILE:gloo_transport_test>)
    list(APPEND _gloo_tests gloo_transport_np${np})
  endforeach()
  add_test(NAME gloo_transport_np2_tcp
    COMMAND replicator launch -n 2 -- $<TARGET_FILE:gloo_transport_test>)
  set_tests_properties(gloo_transport_np2_tcp PROPERTIES
    ENVIRONMENT "REPLICATOR_SHARED_MEMORY=off")
  list(APPEND _gloo_tests gloo_transport_np2_tcp)
  # Starts redis-server on a free port; exits 77 (skipped) if redis-server is not installed.
  add_test(NAME gloo_transport_redis
    COMMAND gloo_transport_test --redis $<TARGET_FILE:replicator>)
  set_tests_properties(gloo_transport_redis PROPERTIES SKIP_RETURN_CODE 77)
  list(APPEND _gloo_tests gloo_transport_redis)
endif()
set_tests_properties(${_gloo_tests} PROPERTIES LABELS "multiproc" TIMEOUT 120)

# The same suite in a program that also links LibTorch and runs a torch operation, and the
# dynamic linker's bindings of every gloo symbol in it (tests/engines/gloo_bindings.sh).
if(TARGET replicator_torch AND TARGET replicator)
  add_executable(gloo_transport_torch_test ${CMAKE_CURRENT_LIST_DIR}/gloo_transport_test.cc)
  target_include_directories(gloo_transport_torch_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(gloo_transport_torch_test PRIVATE REPLICATOR_TEST_WITH_TORCH=1)
  target_link_libraries(gloo_transport_torch_test
    PRIVATE replicator::core replicator::torch GTest::gtest Threads::Threads)
  target_compile_options(gloo_transport_torch_test PRIVATE -Wall -Wextra)
  target_precompile_headers(gloo_transport_torch_test REUSE_FROM replicator_torch)
  add_test(NAME gloo_transport_torch_np2
    COMMAND replicator launch -n 2 -- $<TARGET_FILE:gloo_transport_torch_test>)
  add_test(NAME gloo_bindings COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/gloo_bindings.sh
    $<TARGET_FILE:replicator> $<TARGET_FILE:gloo_transport_torch_test>)
  set_tests_properties(gloo_transport_torch_np2 gloo_bindings PROPERTIES
    LABELS "multiproc" TIMEOUT 180)
endif()

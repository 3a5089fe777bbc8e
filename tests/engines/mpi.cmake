# Tests of the mpi transport: one program, run under mpirun with 2 and with 3 processes.
# Included from tests/CMakeLists.txt when MPI is found.
add_executable(mpi_transport_test ${CMAKE_CURRENT_LIST_DIR}/mpi_transport_test.cc)
target_include_directories(mpi_transport_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(mpi_transport_test PRIVATE replicator::core GTest::gtest)
target_compile_options(mpi_transport_test PRIVATE -Wall -Wextra)

foreach(np 2 3)
  add_test(NAME mpi_transport_np${np}
    COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np ${np}
            $<TARGET_FILE:mpi_transport_test>)
  set_tests_properties(mpi_transport_np${np} PROPERTIES LABELS "multiproc" TIMEOUT 120)
endforeach()
# Small messages go through shared memory between processes of one host; here through MPI.
add_test(NAME mpi_transport_np2_no_shared_memory
  COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 2
          -x REPLICATOR_SHARED_MEMORY=off $<TARGET_FILE:mpi_transport_test>)
set_tests_properties(mpi_transport_np2_no_shared_memory PROPERTIES
  LABELS "multiproc" TIMEOUT 120)

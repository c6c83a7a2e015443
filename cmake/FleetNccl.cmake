# FLEET_WITH_NCCL=AUTO|ON|OFF. NCCL and CUDA are never required to build FleetJob: AUTO uses them
# when both the CUDA toolkit and nccl.h/libnccl are found, ON fails the configure step without them,
# OFF never looks. The result is FLEET_HAVE_NCCL and, when true, the imported target fleet::nccl.
set(FLEET_HAVE_NCCL OFF)
string(TOUPPER "${FLEET_WITH_NCCL}" _fleet_nccl_mode)
if(NOT _fleet_nccl_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FLEET_WITH_NCCL must be AUTO, ON or OFF (got '${FLEET_WITH_NCCL}')")
endif()

if(NOT _fleet_nccl_mode STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  find_path(FLEET_NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(FLEET_NCCL_LIBRARY nccl
               HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(CUDAToolkit_FOUND AND FLEET_NCCL_INCLUDE_DIR AND FLEET_NCCL_LIBRARY)
    set(FLEET_HAVE_NCCL ON)
    add_library(fleet_nccl INTERFACE)
    target_include_directories(fleet_nccl SYSTEM INTERFACE ${FLEET_NCCL_INCLUDE_DIR})
    target_link_libraries(fleet_nccl INTERFACE ${FLEET_NCCL_LIBRARY} CUDA::cudart)
    add_library(fleet::nccl ALIAS fleet_nccl)
  elseif(_fleet_nccl_mode STREQUAL "ON")
    message(FATAL_ERROR "FLEET_WITH_NCCL=ON but CUDA (${CUDAToolkit_FOUND}) or NCCL "
                        "(include: ${FLEET_NCCL_INCLUDE_DIR}, lib: ${FLEET_NCCL_LIBRARY}) was not found")
  endif()
endif()
message(STATUS "FleetJob: NCCL/CUDA support ${FLEET_HAVE_NCCL} (FLEET_WITH_NCCL=${FLEET_WITH_NCCL})")

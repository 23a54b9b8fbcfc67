# NOTE [Install tree]: `cmake --install build --prefix P` lays out
#   P/bin/fullshard                           the CLI
#   P/share/fullshard/scenarios/              scenarios, hardware/ profiles, data/ (data_dir())
#   P/include/fullshard/{core,simulator,...}  headers, included as "core/..." like in the tree
#   P/lib/libfullshard_*.a                    one static library per module (fullshard_module)
#   P/lib/cmake/fullshard/                    the fullshard:: package (find_package(fullshard))
# The installed CLI finds its data next to itself (../share/fullshard/scenarios, from
# /proc/self/exe; core/scenario/hardware_profile.cc data_dir()); a build-tree binary keeps the
# source tree's scenarios/. The CUDA libraries are not exported (they link NCCL/cuDNN through
# targets imported in this tree only); the installed CLI includes them where they were built.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FULLSHARD_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/fullshard/scenarios)
set(FULLSHARD_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/fullshard)

install(TARGETS fullshard RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/scenarios/ DESTINATION ${FULLSHARD_INSTALL_DATADIR})

get_property(fullshard_exported_modules GLOBAL PROPERTY FULLSHARD_MODULES)
install(TARGETS ${fullshard_exported_modules} EXPORT fullshard-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fullshard)
foreach(dir core simulator backends runner tools/plot)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fullshard/${dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()

install(EXPORT fullshard-targets NAMESPACE fullshard:: DESTINATION ${FULLSHARD_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fullshard-config.cmake.in
    ${PROJECT_BINARY_DIR}/fullshard-config.cmake
    INSTALL_DESTINATION ${FULLSHARD_INSTALL_CMAKEDIR}
    PATH_VARS FULLSHARD_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fullshard-config-version.cmake
    COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fullshard-config.cmake
              ${PROJECT_BINARY_DIR}/fullshard-config-version.cmake
        DESTINATION ${FULLSHARD_INSTALL_CMAKEDIR})

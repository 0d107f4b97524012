# Static linking against Debian's archives (FLASHSERVE_STATIC=ON).
#
# Debian's CMake package files point their imported targets at the shared objects. For binaries
# that must run on a machine without these libraries (the GPU machine), we re-point every
# imported target at the .a archive that sits beside the .so. Call after find_package.
include_guard(GLOBAL)

function(fs_prefer_static_archives)
  foreach(target IN LISTS ARGN)
    if(NOT TARGET ${target})
      continue()
    endif()
    # Plain "-lfoo" / "foo" / "/path/libfoo.so" items in the interface (e.g. re2::re2 from
    # pkg-config) become the archive when Debian ships one.
    get_target_property(iface ${target} INTERFACE_LINK_LIBRARIES)
    if(iface)
      set(rewritten "")
      foreach(item IN LISTS iface)
        set(lib "")
        if(item MATCHES "^-l([A-Za-z0-9_+.-]+)$")
          set(lib "${CMAKE_MATCH_1}")
        elseif(item MATCHES "^/.*/lib([A-Za-z0-9_+.-]+)\\.so(\\.[0-9.]+)?$")
          set(lib "${CMAKE_MATCH_1}")
        endif()
        if(lib AND EXISTS "/usr/lib/x86_64-linux-gnu/lib${lib}.a")
          list(APPEND rewritten "/usr/lib/x86_64-linux-gnu/lib${lib}.a")
        else()
          list(APPEND rewritten "${item}")
        endif()
      endforeach()
      set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${rewritten}")
    endif()
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY")
      continue()
    endif()
    foreach(prop IMPORTED_LOCATION_NONE IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION)
      get_target_property(loc ${target} ${prop})
      if(loc AND loc MATCHES "^(.*)\\.so(\\.[0-9.]+)?$")
        set(archive "${CMAKE_MATCH_1}.a")
        if(EXISTS "${archive}")
          set_target_properties(${target} PROPERTIES ${prop} "${archive}" IMPORTED_NO_SONAME TRUE)
        endif()
      endif()
    endforeach()
  endforeach()
endfunction()

# All imported targets defined in the current directory (find_package results).
function(fs_static_all_imported)
  get_directory_property(targets IMPORTED_TARGETS)
  fs_prefer_static_archives(${targets})
endfunction()

# Static UCX registers its transports from constructors that the linker drops unless these
# entry points are kept (pkg-config --static --libs ucx prints the same flags); without them
# ucp_init aborts at start. libucm comes last because ucs needs it.
function(fs_static_ucx_fixups)
  if(TARGET ucx::ucp)
    find_library(FS_UCM_ARCHIVE libucm.a)
    set_property(TARGET ucx::ucp APPEND PROPERTY INTERFACE_LINK_OPTIONS
      "LINKER:--undefined=ucp_global_init" "LINKER:--undefined=uct_init"
      "LINKER:--undefined=ucs_init")
    set_property(TARGET ucx::ucp APPEND PROPERTY INTERFACE_LINK_LIBRARIES
      ucx::uct ucx::ucs ${FS_UCM_ARCHIVE} ${CMAKE_DL_LIBS} rt)
  endif()
endfunction()

# spdlog and fmt are used header-only everywhere (Debian ships fmt only as a shared object, and
# header-only keeps static binaries free of it): drop the shared fmt from spdlog's interface.
function(fs_header_only_logging)
  if(TARGET spdlog::spdlog_header_only)
    set_target_properties(spdlog::spdlog_header_only PROPERTIES
      INTERFACE_LINK_LIBRARIES "Threads::Threads;fmt::fmt-header-only")
  endif()
endfunction()

# One library a layer of src/, each compiled against its own headers and those of the layers it
# names, and nothing else: the layers' headers are found through include roots of their own in the
# build tree (links to src/<dir> and to the layer's public headers in include/tfm), and a library
# gets the roots of the layers it links alone. So an include of a layer not listed (one above)
# fails to build. Dependencies are PRIVATE: a layer lists every layer whose headers it reads,
# through another's headers too.
#
#   tfm_layer(NAME DIRS src-subdir... [HEADERS include/tfm file...] [DEPS layer...]
#             [LIBS external...] [OBJECT])
# OBJECT: an object library (the backends, which register themselves, so every program that links
# the layers gets their objects whole).
# The include root of a layer: build/layers/NAME, holding links to its folders and headers.
function(tfm_layer_root name)
  cmake_parse_arguments(L "" "" "DIRS;HEADERS" ${ARGN})
  set(root ${CMAKE_BINARY_DIR}/layers/${name})
  # Afresh at each configure: a link left from an earlier list would hide a missing dependency.
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/tfm)
  foreach(dir ${L_DIRS})
    get_filename_component(parent ${root}/${dir} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${dir} ${root}/${dir} SYMBOLIC)
  endforeach()
  foreach(header ${L_HEADERS})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/include/tfm/${header} ${root}/tfm/${header} SYMBOLIC)
  endforeach()
endfunction()

function(tfm_layer name)
  cmake_parse_arguments(L "OBJECT" "" "DIRS;HEADERS;DEPS;LIBS;SOURCES" ${ARGN})
  tfm_layer_root(${name} DIRS ${L_DIRS} HEADERS ${L_HEADERS})
  set(root ${CMAKE_BINARY_DIR}/layers/${name})
  set(sources ${L_SOURCES})
  if(NOT L_SOURCES)
    foreach(dir ${L_DIRS})
      file(GLOB_RECURSE found CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${dir}/*.cc)
      list(APPEND sources ${found})
    endforeach()
  endif()
  list(FILTER sources EXCLUDE REGEX "_fuzz\\.cc$")
  if(L_OBJECT)
    add_library(tfm_${name} OBJECT ${sources})
  else()
    add_library(tfm_${name} STATIC ${sources})
  endif()
  target_include_directories(tfm_${name} PUBLIC ${root})
  foreach(dep ${L_DEPS})
    target_link_libraries(tfm_${name} PRIVATE tfm_${dep})
  endforeach()
  target_link_libraries(tfm_${name} PUBLIC ${L_LIBS})
  set_property(GLOBAL APPEND PROPERTY TFM_LAYERS tfm_${name})
  if(L_OBJECT)
    set_property(GLOBAL APPEND PROPERTY TFM_OBJECT_LAYERS tfm_${name})
  endif()
endfunction()

# Everything, for the programs above the layers (the CLI, tests, benchmarks): every layer's
# include root and library, the backends' objects whole.
function(tfm_umbrella name)
  get_property(layers GLOBAL PROPERTY TFM_LAYERS)
  get_property(objects GLOBAL PROPERTY TFM_OBJECT_LAYERS)
  add_library(${name} INTERFACE)
  target_link_libraries(${name} INTERFACE ${layers})
  foreach(object ${objects})
    target_sources(${name} INTERFACE $<TARGET_OBJECTS:${object}>)
  endforeach()
endfunction()

# Server tests. They link weft_server_core: the server's files without the service_*.c adapters, so the HTTP
# layer builds and is tested without the engine, tokenizer and template libraries (the tests use a fake service).
file(GLOB WEFT_SERVER_CORE_SRCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
list(FILTER WEFT_SERVER_CORE_SRCS EXCLUDE REGEX "/service_[^/]*\\.c$")
add_library(weft_server_core STATIC EXCLUDE_FROM_ALL ${WEFT_SERVER_CORE_SRCS})
target_link_libraries(weft_server_core PUBLIC weft_util PkgConfig::MHD PkgConfig::JANSSON OpenSSL::Crypto
                      Threads::Threads)

if(EXISTS ${CMAKE_SOURCE_DIR}/tests/unit/test_server_stream.c)
  weft_add_test(test_server_stream SOURCES test_server_stream.c LIBS weft_server_core)
endif()
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/unit/test_server_request.c)
  weft_add_test(test_server_request SOURCES test_server_request.c test_server_fake.c LIBS weft_server_core)
endif()
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/unit/test_server_http.c)
  weft_add_test(test_server_http SOURCES test_server_http.c test_server_fake.c test_server_client.c
                LIBS weft_server_core)
endif()

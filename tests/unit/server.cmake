# Server tests. They link weft_server_core: the server's files without the service_*.c adapters, so the HTTP
# layer builds and is tested without the engine, tokenizer and template libraries (the tests use a fake service).
file(GLOB WEFT_SERVER_CORE_SRCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
list(FILTER WEFT_SERVER_CORE_SRCS EXCLUDE REGEX "/service_[^/]*\\.c$")
add_library(weft_server_core STATIC EXCLUDE_FROM_ALL ${WEFT_SERVER_CORE_SRCS})
target_link_libraries(weft_server_core PUBLIC weft_sampler weft_util PkgConfig::MHD PkgConfig::JANSSON OpenSSL::Crypto
                      Threads::Threads)

weft_add_test(test_server_stream SOURCES test_server_stream.c LIBS weft_server_core)
weft_add_test(test_server_request SOURCES test_server_request.c test_server_fake.c LIBS weft_server_core)
weft_add_test(test_server_http SOURCES test_server_http.c test_server_fake.c test_server_client.c
              LIBS weft_server_core)
weft_add_test(test_server_http2 SOURCES test_server_http2.c test_server_fake.c test_server_client.c
              LIBS weft_server_core)

# The adapter over the real lane engine, tokenizer and chat template (src/server/service_lanes.c).
file(GLOB WEFT_SERVER_SERVICE_SRCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/service_*.c)
add_library(weft_server_service STATIC EXCLUDE_FROM_ALL ${WEFT_SERVER_SERVICE_SRCS})
target_link_libraries(weft_server_service PUBLIC weft_server_core weft_lanes weft_tokenizer weft_template)
weft_add_test(test_server_lanes SOURCES test_server_lanes.c test_server_client.c LIBS weft_server_service)

# `weft serve` over the fake service, to run the pytest HTTP suite (tests/py) without a model. Not a test.
add_executable(test_server_fakeserve EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/tests/unit/test_server_fakeserve.c
               ${CMAKE_SOURCE_DIR}/tests/unit/test_server_fake.c)
target_link_libraries(test_server_fakeserve PRIVATE weft_server_core)

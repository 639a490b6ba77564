# Lane core: engine thread, rounds, mailboxes, prompt cache, drafts, and the history-sensitive fake backend.
weft_add_test(test_lanes_fake SOURCES test_lanes_fake.c LIBS weft_lanes)
weft_add_test(test_lanes SOURCES test_lanes.c test_lanes_util.c LIBS weft_lanes)
weft_add_test(test_lanes_control SOURCES test_lanes_control.c test_lanes_util.c LIBS weft_lanes)
weft_add_test(test_lanes_cache SOURCES test_lanes_cache.c test_lanes_util.c LIBS weft_lanes)
weft_add_test(test_lanes_drafts SOURCES test_lanes_drafts.c test_lanes_util.c LIBS weft_lanes)
# resumed == fresh and drafted == serial on the real CPU backend (llama fixture).
weft_add_test(test_lanes_cpu SOURCES test_lanes_cpu.c test_lanes_util.c LIBS weft_lanes weft_model)

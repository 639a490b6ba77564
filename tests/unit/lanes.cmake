# Lane core: engine thread, rounds, mailboxes, and the history-sensitive fake backend.
weft_add_test(test_lanes_fake SOURCES test_lanes_fake.c LIBS weft_lanes)
weft_add_test(test_lanes SOURCES test_lanes.c test_lanes_util.c LIBS weft_lanes)
weft_add_test(test_lanes_control SOURCES test_lanes_control.c test_lanes_util.c LIBS weft_lanes)

# MTP draft heads (src/families/mtp*.c, qwen3_5_mtp.c, nemotron_h_mtp.c): loading, proposals as a function of
# the tokens (rollback, chunking, prompt-cache restore), and drafted == serial / resumed == fresh through the
# lane engine on the CPU backend.
weft_add_test(test_mtp SOURCES test_mtp.c LIBS weft_model)
weft_add_test(test_mtp_engine SOURCES test_mtp_engine.c test_lanes_util.c LIBS weft_lanes weft_model)
# Batched drafting (draft_many): 1..8 streams at once, at their own positions and depths, bit-identical to
# each drafting alone (proposals and state snapshots), on every fixture with a head; timing printed.
weft_add_test(test_mtp_batch SOURCES test_mtp_batch.c LIBS weft_model)

#include "test_server_http.h"
int main(int argc, char **argv) {
    fake_config fc; fake_config_default(&fc); fc.round_s = atof(argv[1]);
    weft_server_config c; weft_server_config_default(&c); c.log_format = WEFT_LOG_NONE; c.idle_timeout_s = atoi(argv[2]);
    env e; env_start(&e, &fc, &c);
    double t0 = weft_now();
    http_resp r;
    http_post(e.port, "/v1/completions", "{\"prompt\":\"SAY:abcdefghijklmnopqrstuvwxyz\",\"max_tokens\":15,\"stream\":true,\"draft\":false}", &r);
    printf("stream %d %.1fs %zu bytes, DONE=%d\n", r.status, weft_now()-t0, r.body_len, strstr(r.body, "[DONE]") != NULL);
    http_resp_free(&r);
    env_stop(&e);
    return check_report("exp");
}

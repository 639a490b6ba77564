/* Weights-vs-memory check: refuse a load that cannot fit, with both numbers, instead of letting the kernel's
 * OOM killer decide mid-run. */
#include "weft/safetensors.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

size_t weft_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        bool found = false;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                found = true;
                break;
            }
        fclose(f);
        if (found) return (size_t)kb * 1024u;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) return (size_t)pages * (size_t)psz;
    return 0;
}

weft_status weft_check_memory_against(size_t need_bytes, size_t avail_bytes, const char *what,
                                      weft_err *err) {
    if (avail_bytes == 0 || need_bytes <= avail_bytes) return WEFT_OK;
    return weft_err_set(err, WEFT_ENOMEM, "%s needs %.1f MiB but only %.1f MiB of memory is available",
                        what ? what : "the load", (double)need_bytes / 1048576.0,
                        (double)avail_bytes / 1048576.0);
}

weft_status weft_check_memory(size_t need_bytes, const char *what, weft_err *err) {
    return weft_check_memory_against(need_bytes, weft_mem_available(), what, err);
}

/* load.h — helpers shared by the commands that run a model. */
#ifndef WEFT_CLI_LOAD_H
#define WEFT_CLI_LOAD_H

#include "cli.h"
#include "weft/console.h"
#include "weft/lanes.h"
#include "weft/model.h"
#include "weft/sampler.h"

#include <signal.h>

/* Loads o->model or the embedded stories260K; prints the error and returns 2 on failure. */
int cli_load_model(const cli_options *o, weft_model **out);
/* The same, drawing the weight-loading progress bar as con's status line (con borrowed; NULL = on stderr).
 * stop (NULL = none): signals the caller keeps blocked for sigwait; when one of them is pending while the
 * weights are read in, loading stops, *out is freed and NULL, and the return is CLI_LOAD_STOPPED. */
#define CLI_LOAD_STOPPED 3
int cli_load_model_on(const cli_options *o, weft_model **out, weft_console *con, const sigset_t *stop);
int cli_threads(const cli_options *o);
/* After weft_model_backend_plan succeeded: one line on stderr when --backend auto fell back to the CPU. */
void cli_backend_note(const weft_backend_plan *plan);
/* Sampling defaults: generation_config (m may be NULL: none), then command-line flags. */
void cli_sampling(const cli_options *o, const weft_model *m, weft_sampling *s);
/* The sampling flags alone (m NULL above) checked by weft_sampling_validate before anything is loaded:
 * 0, or 2 after one line on stderr naming the flags and the rule broken. */
int cli_sampling_flags_ok(const cli_options *o);
/* The engine of `run` and `serve` over be: caps ec's draft depths (max_draft, and max_model_draft when
 * positive) at rows − 1 (a drafted window is one forward of at most `rows` rows, the backend's row budget,
 * --chunk); unless no_drafts, makes the copy drafter for ec->parallel streams of ec->capacity positions into
 * *drafter and sets ec->drafter; then creates and starts *eng. Prints the error and returns 2 on failure
 * (what was made stays in *drafter / *eng for the caller to free), else 0. */
int cli_engine_start(weft_engine_config *ec, weft_backend *be, int rows, bool no_drafts,
                     weft_drafter *drafter, weft_engine **eng);

#endif

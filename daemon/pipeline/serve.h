/* blocktraind -S: the inference pipeline host (DESIGN section 2).  It
 * serves its blocks and its slice of the causal LM over direct TCP with
 * the frames of proto/pipeline.h, keeps one persistent connection to the
 * next host in traversal order, and, on the entry host, takes client
 * requests and answers them.  See blocktraind(8). */
#ifndef SM_SERVE_H
#define SM_SERVE_H

#include "daemon/core/startup.h"

/* The whole daemon in serve mode, after its flags: start-up, loop, exit
 * code. */
int sv_main(const startup_flags *f);

#endif
